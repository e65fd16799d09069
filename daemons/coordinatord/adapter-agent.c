/* SPDX-License-Identifier: MIT */
/*
 * adapter-agent.c — what the agent CLI adapters (claude, codex) share: the
 * start of their exec with the prompt on stdin, and their state, a JSON
 * object of what is open and the ending decided (AgentState, adapter.h).
 */
#include "config.h"

#include "adapter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

int
agent_cli_start(Run *run, const char *what, const json_t *messages, const json_t *metadata,
		const char *dflt, const char *const *fixed, ExecSpec *spec,
		const char **ret_session)
{
	_cleanup_free_ char *prompt = NULL;
	int r;

	r = agent_cli_begin(run, what, messages, metadata, dflt, fixed, spec, &prompt, ret_session);
	if (r < 0)
		return r;
	spec->stdin_len = strlen(prompt);
	spec->stdin_data = TAKE_PTR(prompt);
	return 0;
}

int
agent_state_new(Run *run, size_t size)
{
	AgentState *a = calloc(1, size);
	if (!a || !(a->open = json_object())) {
		free(a);
		return -ENOMEM;
	}
	run->astate = a;
	return 0;
}

void
agent_state_free(Run *run)
{
	AgentState *a = run->astate;
	if (!a)
		return;
	json_decref(a->open);
	ending_done(&a->ending);
	free(a);
	run->astate = NULL;
}

int
agent_state_load(AgentState *a, const json_t *open, const json_t *state)
{
	json_t *copy = json_deep_copy(open);
	if (!copy)
		return -ENOMEM;
	json_decref(a->open);
	a->open = copy;
	return ending_load(&a->ending, json_object_get(state, "ending"));
}
