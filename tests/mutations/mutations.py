"""The planted bugs: each names a file, an exact text that occurs there once,
its replacement, what the bug is, and the focused tests that must fail with
it. run.py applies them one at a time to a copy of the repository.

A mutation whose text no longer occurs exactly once fails the run: a
refactor must update the mutation, it cannot silently disable it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    description: str
    selection: tuple[str, ...]  # pytest node ids that must fail with the bug in place


SCRIPTS = "tests/test_scripts.py"
STORE = "tests/test_store_v2.py"
RUNTIME = "tests/test_runtime.py"
LIMITS = "tests/test_limits.py"

MUTATIONS: tuple[Mutation, ...] = (
    # -- Lua: fencing -----------------------------------------------------------
    Mutation(
        "ack-ignores-token", "lua/ack.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == tokens[i] then",
        "if meta and meta.state == 'leased' then",
        "ack.lua finishes a job whatever token the ack carries",
        (f"{SCRIPTS}::test_ack_stores_result_and_refuses_stale",),
    ),
    Mutation(
        "ack-ignores-state", "lua/ack.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == tokens[i] then",
        "if meta and tonumber(meta.token) == tokens[i] then",
        "ack.lua finishes a job that is no longer leased (a second ack lands again)",
        (f"{SCRIPTS}::test_ack_stores_result_and_refuses_stale",),
    ),
    Mutation(
        "renew-accepts-any-token", "lua/renew.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == token then",
        "if meta and meta.state == 'leased' then",
        "renew.lua extends a lease for a stale token",
        (f"{SCRIPTS}::test_renew_fenced_by_token",),
    ),
    Mutation(
        "start-ignores-token", "lua/start.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == token\n",
        "if meta and meta.state == 'leased'\n",
        "start.lua starts a run for a stale token",
        (f"{STORE}::test_start_counts_the_attempt_once_and_refuses_a_stale_token",),
    ),
    Mutation(
        "fail-ignores-token", "lua/fail.lua",
        "if not meta or meta.state ~= 'leased' or tonumber(meta.token) ~= token then",
        "if not meta or meta.state ~= 'leased' then",
        "fail.lua records a failure for a stale token",
        (f"{SCRIPTS}::test_fail_permanent_goes_dead_at_once_and_stale_refused",),
    ),
    Mutation(
        "release-ignores-token", "lua/release.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == token then",
        "if meta and meta.state == 'leased' then",
        "release.lua hands back a job for a stale token",
        (f"{SCRIPTS}::test_release_refunds_attempt_keeps_place_and_is_idempotent",),
    ),
    Mutation(
        "token-not-above-record", "lua/claim.lua",
        "meta.token = math.max(token, tonumber(meta.token) + 1)",
        "meta.token = token",
        "claim.lua takes the counter's token without max'ing it with the record's "
        "(a lost counter repeats tokens)",
        (f"{STORE}::test_tokens_never_repeat_for_a_job_when_the_counters_are_lost",),
    ),
    # -- Lua: states and attempts -------------------------------------------------
    Mutation(
        "claim-ignores-state", "lua/claim.lua",
        "if meta and meta.state == 'queued' then",
        "if meta then",
        "claim.lua leases whatever record a ready-set entry names, whatever its state",
        (f"{SCRIPTS}::test_a_stale_ready_entry_does_not_lease_its_job",),
    ),
    Mutation(
        "claim-retry-leases-anew", "lua/claim.lua",
        "if sep and string.sub(last, 1, sep - 1) == claim_id then",
        "if false then",
        "claim.lua ignores the claim id: a retried claim leases new jobs",
        (f"{STORE}::test_a_retried_claim_returns_the_same_jobs_and_leases_nothing_new",),
    ),
    Mutation(
        "claim-retry-keeps-old-lease", "lua/claim.lua",
        "        redis.call('ZADD', leases_key, lease_until, id)\n",
        "",
        "claim.lua returns a retried claim's jobs without renewing their leases "
        "(found by model/lease.pml)",
        (f"{STORE}::test_a_retried_claim_renews_the_leases_it_returns",),
    ),
    Mutation(
        "enqueue-no-dedup", "lua/enqueue.lua",
        "  if state then\n",
        "  if false then\n",
        "enqueue.lua overwrites a job that exists under the same id",
        (f"{SCRIPTS}::test_enqueue_dedup_returns_existing",),
    ),
    Mutation(
        "start-does-not-count", "lua/start.lua",
        "meta.attempt = tonumber(meta.attempt) + 1",
        "meta.attempt = tonumber(meta.attempt)",
        "start.lua marks a run started without counting its attempt",
        (f"{STORE}::test_start_counts_the_attempt_once_and_refuses_a_stale_token",),
    ),
    Mutation(
        "release-forgets-refund", "lua/release.lua",
        "meta.attempt = math.max(0, tonumber(meta.attempt) - 1)",
        "meta.attempt = tonumber(meta.attempt)",
        "release.lua hands a started run back without refunding its attempt",
        (f"{SCRIPTS}::test_release_refunds_attempt_keeps_place_and_is_idempotent",),
    ),
    Mutation(
        "fail-ignores-max-attempts", "lua/fail.lua",
        "if tonumber(meta.attempt) >= max_attempts then",
        "if false then",
        "fail.lua retries a work failure forever (max_attempts ignored)",
        (f"{SCRIPTS}::test_fail_work_retries_with_delay_then_dies",),
    ),
    Mutation(
        "fail-infra-counts-attempt", "lua/fail.lua",
        "  if started then\n    meta.attempt = math.max(0, tonumber(meta.attempt) - 1)\n  end\n",
        "",
        "fail.lua charges an infrastructure failure to max_attempts (no refund)",
        (f"{SCRIPTS}::test_fail_infra_has_its_own_budget_and_refunds_attempt",),
    ),
    Mutation(
        "reap-skips-budget", "lua/reap.lua",
        "spent = tonumber(meta.attempt) >= budget(meta.max_attempts, by_name[1])",
        "spent = false",
        "reap.lua requeues a started run forever (a poison job never dies)",
        (f"{SCRIPTS}::test_poison_job_dies_lease_expired",),
    ),
    Mutation(
        "reap-skips-infra-count", "lua/reap.lua",
        "meta.infra_fail = tonumber(meta.infra_fail) + 1",
        "meta.infra_fail = tonumber(meta.infra_fail)",
        "reap.lua does not count an unstarted expiry against the infra budget",
        (f"{STORE}::test_unstarted_expiry_is_requeued_as_infra_not_an_attempt",),
    ),
    Mutation(
        "reap-takes-live-leases", "lua/reap.lua",
        "redis.call('ZRANGEBYSCORE', leases_key, '-inf', int(now), 'LIMIT', 0, batch)",
        "redis.call('ZRANGEBYSCORE', leases_key, '-inf', '+inf', 'LIMIT', 0, batch)",
        "reap.lua hands back leases that have not expired",
        (f"{SCRIPTS}::test_reap_requeues_expired_and_is_idempotent",),
    ),
    Mutation(
        "cancel-started-at-once", "lua/cancel.lua",
        "or (leased and token == 0 and meta.started ~= '1') then",
        "or (leased and token == 0) then",
        "cancel.lua ends a started, leased job at once (its run goes on unfenced)",
        (f"{SCRIPTS}::test_cancel_each_state_and_idempotent",),
    ),
    Mutation(
        "expire-deletes-live", "lua/_lib.lua",
        "if not meta or meta.state == 'succeeded' or meta.state == 'skipped' "
        "or meta.state == 'canceled' then",
        "if true then",
        "expiry (expire.lua, ack.lua) deletes a record that is live again",
        (f"{SCRIPTS}::test_expire_leaves_a_live_record_alone",),
    ),
    Mutation(
        "expire-ignores-retention", "lua/_lib.lua",
        "redis.call('ZRANGEBYSCORE', k.done, '-inf', int(now), 'LIMIT', 0, batch)",
        "redis.call('ZRANGEBYSCORE', k.done, '-inf', '+inf', 'LIMIT', 0, batch)",
        "expiry deletes finished records before their retention ran out",
        (f"{STORE}::test_ack_deletes_expired_finished_records_up_to_expire_batch",),
    ),
    # -- Lua: the limiter -------------------------------------------------------------
    Mutation(
        "limiter-grants-all", "lua/limiter_acquire.lua",
        "if redis.call('ZSCORE', limit_key, holder) or redis.call('ZCARD', limit_key) < limit then",
        "if true then",
        "limiter_acquire.lua grants every request (the killed-holder test must see it)",
        (f"{LIMITS}::test_a_killed_holder_frees_its_slot_after_the_limiter_lease",),
    ),
    Mutation(
        "limiter-grants-all-unit", "lua/limiter_acquire.lua",
        "if redis.call('ZSCORE', limit_key, holder) or redis.call('ZCARD', limit_key) < limit then",
        "if true then",
        "limiter_acquire.lua grants every request (the script test)",
        (f"{LIMITS}::test_redis_limiter_take_renew_release_replace",),
    ),
    Mutation(
        "limiter-keeps-lapsed-holders", "lua/limiter_acquire.lua",
        "redis.call('ZREMRANGEBYSCORE', limit_key, '-inf', int(now))\n",
        "",
        "limiter_acquire.lua never drops a holder whose lease lapsed (a killed "
        "holder keeps its slot forever)",
        (f"{LIMITS}::test_a_killed_holder_frees_its_slot_after_the_limiter_lease",),
    ),
    Mutation(
        "limiter-renew-revives", "lua/limiter_renew.lua",
        "  if redis.call('ZSCORE', limit_key, ARGV[i]) then\n",
        "  if true then\n",
        "limiter_renew.lua re-takes a slot its holder had lost",
        (f"{LIMITS}::test_redis_limiter_take_renew_release_replace",),
    ),
    # -- the Python runtime ---------------------------------------------------------------
    Mutation(
        "heartbeater-ignores-lost", "leasequeue/runtime/heartbeater.py",
        "                    table.lose(run, StopReason.LEASE_LOST)\n",
        "                    pass\n",
        "the heartbeater ignores a LOST renewal answer (the run goes on, unfenced)",
        (f"{RUNTIME}::test_a_lost_renewal_stops_the_run",),
    ),
    Mutation(
        "heartbeater-ignores-cancel", "leasequeue/runtime/heartbeater.py",
        "                table.stop(run, StopReason.CANCELED)\n",
        "                pass\n",
        "the heartbeater ignores a cancel request",
        (f"{RUNTIME}::test_a_cancel_request_in_a_renewal_stops_the_run",),
    ),
    Mutation(
        "start-ignores-lease-validity", "leasequeue/runtime/runs.py",
        "        if run.lease_confirmed_at + run.lease_s - now < min_share * run.lease_s:\n"
        "            return False\n",
        "",
        "RunTable.start starts a run whose lease may have lapsed",
        (f"{RUNTIME}::test_a_run_whose_lease_may_have_lapsed_does_not_start",),
    ),
    Mutation(
        "lapses-keep-lapsed-leases", "leasequeue/runtime/runs.py",
        "                if run.lease_valid_until <= now:\n",
        "                if False:\n",
        "RunTable.lapses keeps a run whose lease ran out by our clock",
        (f"{RUNTIME}::test_lapses_lose_leases_and_stop_runs_whose_slot_lapsed",),
    ),
    Mutation(
        "timeout-not-enforced", "leasequeue/runtime/timeouts.py",
        "if run.stop_reason is None and run.timeout_at <= now:",
        "if False:",
        "a run that passes its timeout is not stopped",
        ("tests/test_worker.py::test_timeout_is_a_work_failure",),
    ),
    Mutation(
        "executor-releases-slots-early", "leasequeue/runtime/executor.py",
        "        try:\n"
        "            outcome = await execute(run, definition, kwargs, self._p.threads)\n"
        "        finally:\n"
        "            self._p.table.returned(run)\n"
        "            if run.slots:\n"
        "                await self._p.limits.release(run)  # only now: its thread has returned\n",
        "        await self._p.limits.release(run)\n"
        "        try:\n"
        "            outcome = await execute(run, definition, kwargs, self._p.threads)\n"
        "        finally:\n"
        "            self._p.table.returned(run)\n",
        "the executor gives its limiter slots back before the handler returns",
        (f"{RUNTIME}::test_a_cancel_before_start_ends_the_job_without_running_it",),
    ),
    Mutation(
        "acker-resends-landed", "leasequeue/runtime/acker.py",
        "            self._pending[:0] = unsent\n",
        "            self._pending[:0] = batch\n",
        "the acker sends the groups that landed again with the one that failed",
        (f"{RUNTIME}::test_a_partly_failed_ack_flush_resends_only_the_failed_group",),
    ),
    Mutation(
        "claimer-new-claim-id", "leasequeue/runtime/claimer.py",
        'claim_id = self._unanswered.get(queue) or f"{self._claim_prefix}{next(self._claims)}"',
        'claim_id = f"{self._claim_prefix}{next(self._claims)}"',
        "the claimer sends an unanswered claim again under a new claim id",
        (f"{RUNTIME}::test_a_claim_without_a_reply_is_sent_again_with_the_same_claim_id",),
    ),
)
