/* SPDX-License-Identifier: MIT */
/*
 * time-util.h — durations are usec_t on the monotonic clock; wire and record
 * timestamps are epoch milliseconds (the public API's unit).
 */
#pragma once

#include <stdint.h>
#include <sys/time.h>

typedef uint64_t usec_t;
#define USEC_PER_SEC ((usec_t)1000000ULL)
#define USEC_PER_MSEC ((usec_t)1000ULL)

/* Monotonic now in microseconds. */
usec_t now_usec(void);
/* Wall-clock now in epoch milliseconds. */
int64_t now_epoch_ms(void);
/* Fill a struct timeval for libevent from a usec_t duration. */
struct timeval *timeval_from_usec(struct timeval *tv, usec_t u);
