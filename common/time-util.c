/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "time-util.h"

#include <time.h>

usec_t
now_usec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

int64_t
now_epoch_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timeval *
timeval_from_usec(struct timeval *tv, usec_t u)
{
	tv->tv_sec = (time_t)(u / USEC_PER_SEC);
	tv->tv_usec = (suseconds_t)(u % USEC_PER_SEC);
	return tv;
}
