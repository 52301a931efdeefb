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
INLINE = "tests/test_inline_payload.py"
RUNTIME = "tests/test_runtime.py"
LIMITS = "tests/test_limits.py"
KIT = "tests/test_kit.py"
COMMON = "tests/test_enqueue_common.py"
BREAKERS = "tests/test_breakers.py"
RESOURCES = "tests/test_resources.py"
RATES = "tests/test_rate_limits.py"
SCOPES = "tests/test_run_scopes.py"
ONE_JOB = "tests/test_one_job_calls.py"
LOADING = "tests/test_loading_replies.py"
LOOPS = "tests/test_lane_loops.py"
LINE = "tests/test_claim_line.py"
SAME = f"{LINE}::test_a_line_claim_writes_and_answers_what_claim_lua_does"
NOTHING = f"{LINE}::test_where_claim_lua_has_more_to_do_the_line_claim_writes_nothing"
ONE = "tests/test_producer_one.py"
SPIN = "tests/test_reply_spin.py"
AHEAD = "tests/test_claim_ahead.py"
BOUNDS = "tests/test_queue_bounds.py"
SWEEP_RULE = ("test_a_sweep_keeps_each_lane_with_work_on_a_live_loop_and_comes_again_at_twice"
              "_them")
APP_QUEUES = f"{BOUNDS}::test_ever_new_queues_keep_each_cache_by_queue_of_app_within_its_bound"
SYNC_QUEUES = (f"{BOUNDS}::test_ever_new_queues_keep_each_cache_by_queue_of_sync_app"
               "_within_its_bound")

MUTATIONS: tuple[Mutation, ...] = (
    # -- Lua: fencing -----------------------------------------------------------
    Mutation(
        "ack-ignores-token", "lua/ack.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == tonumber(ARGV[base + 1])"
        " then",
        "if meta and meta.state == 'leased' then",
        "ack.lua finishes a job whatever token the ack carries",
        (f"{SCRIPTS}::test_ack_stores_result_and_refuses_stale",),
    ),
    Mutation(
        "ack-ignores-state", "lua/ack.lua",
        "if meta and meta.state == 'leased' and tonumber(meta.token) == tonumber(ARGV[base + 1])"
        " then",
        "if meta and tonumber(meta.token) == tonumber(ARGV[base + 1]) then",
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
        "  local mine = tonumber(old) + 1\n",
        "  local mine = token\n",
        "claim.lua takes the counter's token without max'ing it with the record's "
        "(a lost counter repeats tokens; fence() serves both of the claim's lease paths)",
        (f"{STORE}::test_tokens_never_repeat_for_a_job_when_the_counters_are_lost",),
    ),
    # -- Lua: states and attempts -------------------------------------------------
    Mutation(
        "claim-ignores-state", "lua/claim.lua",
        "      local drop = not raw or seen[id] or (string.byte(raw, 1) ~= V4 and\n"
        "                   string.sub(raw, 2, 9) ~= '|queued|' and parse_meta(raw))\n",
        "      local drop = not raw or seen[id]\n",
        "claim.lua keeps an entry of the ready set or the line whatever its record's state "
        "(a leased or finished job's stale entry goes on to the lease loop)",
        (f"{SCRIPTS}::test_a_stale_ready_entry_does_not_lease_its_job",),
    ),
    Mutation(
        "claim-retry-leases-anew", "lua/claim.lua",
        "if head == claim_id then",
        "if false then",
        "claim.lua ignores the claim id: a retried claim leases new jobs",
        (f"{STORE}::test_a_retried_claim_returns_the_same_jobs_and_leases_nothing_new",),
    ),
    Mutation(
        "claim-retry-ignores-range", "lua/claim.lua",
        "meta.worker == worker_id and token >= lo",
        "meta.worker == worker_id and token >= 0",
        "claim.lua's retry returns every job of the worker leased until the same instant, "
        "another claim's too",
        (f"{STORE}::test_a_retried_claim_returns_only_the_jobs_of_its_own_token_range",),
    ),
    Mutation(
        "claim-retry-keeps-old-lease", "lua/claim.lua",
        "    bulk('ZADD', leases_key, renewed)\n",
        "",
        "claim.lua returns a retried claim's jobs without renewing their leases "
        "(found by model/lease.pml)",
        (f"{STORE}::test_a_retried_claim_renews_the_leases_it_returns",),
    ),
    Mutation(
        "claim-ignores-pause", "lua/claim.lua",
        "if paused then\n  count = 0\nend\n",
        "",
        "claim.lua leases from a paused queue (the paused key, read by the claim's MGET, "
        "is not checked)",
        ("tests/test_operator.py::test_pause_stops_new_claims_atomically_under_load",),
    ),
    Mutation(
        "enqueue-no-dedup", "lua/enqueue.lua",
        "  if state then\n",
        "  if false then\n",
        "enqueue.lua's batch path overwrites a job that exists under the same id",
        (f"{SCRIPTS}::test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_own_options",
         f"{SCRIPTS}::test_an_id_over_a_malformed_record_is_answered_malformed_and_writes_"
         "nothing"),
    ),
    Mutation(
        "lease-text-keeps-attempt", "lua/claim.lua",
        "        attempt, started, started_text, att = attempt + 1, 1, '1', int(attempt + 1)\n",
        "        attempt, started, started_text = attempt + 1, 1, '1'\n",
        "claim.lua's lease from the record's text marks the run started but writes the old "
        "attempt (the reply says one more than the record)",
        ("tests/test_lua_contracts.py::test_a_lease_writes_what_encode_meta_writes",),
    ),
    Mutation(
        "lease-text-ignores-park", "lua/claim.lua",
        "            not park_of(parks, parked_key, grp, now_us) and v\n",
        "            v\n",
        "claim.lua's lease from the record's text leases a job whose rate group is parked",
        ("tests/test_rate_limits.py::test_a_job_reaped_back_to_its_place_is_parked_with_its_"
         "group",),
    ),
    Mutation(
        "finish-text-ignores-token", "lua/ack.lua",
        "    if tok ~= ARGV[base + 1] then\n",
        "    if false then\n",
        "ack.lua's finish from the record's text takes any token: a stale holder's ack "
        "finishes a job another worker holds",
        ("tests/test_lua_contracts.py::test_an_ack_writes_what_encode_meta_writes",
         f"{SCRIPTS}::test_ack_stores_result_and_refuses_stale"),
    ),
    Mutation(
        "finish-text-skips-attempt", "lua/ack.lua",
        "      if started ~= '1' then\n        att = int(tonumber(att) + 1)",
        "      if false then\n        att = int(tonumber(att) + 1)",
        "ack.lua's finish from the record's text does not count the attempt of a run "
        "leased ahead and never marked started",
        ("tests/test_lua_contracts.py::test_an_ack_writes_what_encode_meta_writes",),
    ),
    Mutation(
        "enqueue-one-overwrites", "lua/enqueue.lua",
        "  if redis.call('HSETNX', jobs_key, id, record) == 0 then\n",
        "  if redis.call('HSET', jobs_key, id, record) == 0 then\n",
        "enqueue.lua's one-job path writes its record over a job that exists under the "
        "same id (and still answers 'existed')",
        (f"{SCRIPTS}::test_an_id_over_a_malformed_record_is_answered_malformed_and_writes_"
         "nothing",),
    ),
    Mutation(
        "enqueue-one-uncounted", "lua/enqueue.lua",
        "  redis.call('HINCRBY', stats_key, 'enqueued', '1')\n",
        "",
        "enqueue.lua's one-job path does not count the job in the queue's stats",
        (f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job",),
    ),
    Mutation(
        "clock-text-leading-digits", "lua/_lib.lua",
        "  return t[1] .. string.sub('00000' .. t[2], -6, -4)\n",
        "  return t[1] .. string.sub(t[2] .. '000', 1, 3)\n",
        "ms_text takes the first three digits of TIME's microseconds, unpadded: under "
        "100,000 us the enqueue stamp is off by up to 999 ms",
        ("tests/test_lua_contracts.py::test_the_clock_as_text_is_what_now_ms_computes",),
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
        "    if not meta or ended[meta.state] then\n",
        "    if true then\n",
        "expiry (expire.lua, ack.lua) deletes a record that is live again",
        (f"{SCRIPTS}::test_expire_leaves_a_live_record_alone",),
    ),
    Mutation(
        "expire-ignores-retention", "lua/_lib.lua",
        "local due = int(now)\n",
        "local due = '+inf'\n",
        "expiry deletes finished records before their retention ran out",
        (f"{STORE}::test_ack_deletes_expired_finished_records_up_to_expire_batch",),
    ),
    Mutation(
        "expire-forgets-one-by-one", "lua/_lib.lua",
        "  forget_all(gone, k)\nend\n",
        "  for _, id in ipairs(gone) do\n    forget(id, k)\n  end\nend\n",
        "expiry (and purge, and the dead set's trim) deletes each record's traces in calls "
        "of its own, six a record: a worker's acks spend them on every job that finished a "
        "retention before",
        (f"{STORE}::test_expiry_deletes_a_batch_in_a_fixed_number_of_calls",),
    ),
    Mutation(
        "ack-not-kept-forgets-one-by-one", "lua/ack.lua",
        "forget_all(forgotten, k)\n",
        "for _, id in ipairs(forgotten) do\n  forget(id, k)\nend\n",
        "an ack with retention 0 deletes each job's traces in calls of its own, six a job",
        (f"{STORE}::test_an_ack_not_kept_forgets_its_batch_in_a_fixed_number_of_calls",),
    ),
    Mutation(
        "ack-not-kept-keeps-traces", "lua/ack.lua",
        "forget_all(forgotten, k)\n",
        "",
        "an ack with retention 0 deletes nothing: records, payloads and results of finished "
        "jobs stay forever",
        (f"{STORE}::test_an_ack_not_kept_forgets_its_batch_in_a_fixed_number_of_calls",),
    ),
    Mutation(
        "ack-fast-not-kept-writes-record", "lua/ack.lua",
        "    if retention_ms > 0 then\n      if started ~= '1' then\n",
        "    if true then\n      if started ~= '1' then\n",
        "an ack with retention 0 on the record's text keeps the finished record (due at once), "
        "where it should forget it",
        (f"{STORE}::test_an_ack_not_kept_forgets_its_batch_in_a_fixed_number_of_calls",),
    ),
    Mutation(
        "trim-dead-keeps-dead", "lua/_lib.lua",
        "local DEAD = {dead = true}\n",
        "local DEAD = {}\n",
        "the dead set's trim and purge take a dead job out of the dead set and keep its "
        "record, payload and errors for good",
        (f"{STORE}::test_the_dead_set_is_capped_by_count",),
    ),
    Mutation(
        "forget-all-keeps-runstate", "lua/_lib.lua",
        "  bulk('HDEL', k.runstate, fields)\n",
        "",
        "a deleted job's checkpoints, saga and progress stay in Redis forever (every path "
        "that deletes a job: expiry, purge, the dead set's trim, retention 0)",
        (f"{KIT}::test_run_state_is_kept_across_replay_and_deleted_with_the_record",),
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
        "local lapsed = redis.call('ZREMRANGEBYSCORE', limit_key, '-inf', int(now))\n",
        "local lapsed = 0\n",
        "limiter_acquire.lua never drops a holder whose lease lapsed (a killed "
        "holder keeps its slot forever while another holder keeps the limit alive)",
        # the killed-holder process test alone no longer sees it: a limit's key
        # now expires with its last holder's lease (keyed limits), so a lone
        # dead holder goes with the key; the script test lapses the holder
        # while the limit's key is still alive
        (f"{LIMITS}::test_a_killed_holder_frees_its_slot_after_the_limiter_lease",
         f"{LIMITS}::test_a_lapsed_holder_frees_its_slot_on_the_server_clock"),
    ),
    Mutation(
        "limiter-renew-revives", "lua/limiter_renew.lua",
        "  if redis.call('ZSCORE', limit_key, ARGV[i]) then\n",
        "  if true then\n",
        "limiter_renew.lua re-takes a slot its holder had lost",
        (f"{LIMITS}::test_redis_limiter_take_renew_release_replace",),
    ),
    # -- keyed concurrency: a waiting run is woken, never polled ---------------------
    Mutation(
        "limiter-release-keeps-waiters", "lua/limiter_release.lua",
        "if removed > 0 and redis.call('EXISTS', waiters_key) == 1 then",
        "if false then",
        "limiter_release.lua frees the slot but wakes none of the key's waiters (they "
        "wait out their fallback delay)",
        (f"{RATES}::test_a_job_waiting_for_its_key_starts_when_the_slot_frees[redis]",
         f"{RATES}::test_the_limiter_registers_a_waiter_with_its_refusal_and_a_release_"
         "wakes_one_per_slot"),
    ),
    Mutation(
        "limiter-acquire-forgets-waiter", "lua/limiter_acquire.lua",
        "if waiter ~= '' and waiter_ms > 0 then",
        "if false then",
        "limiter_acquire.lua refuses a keyed run without registering it as a waiter",
        (f"{RATES}::test_a_job_waiting_for_its_key_starts_when_the_slot_frees[redis]",
         f"{RATES}::test_the_limiter_registers_a_waiter_with_its_refusal_and_a_release_"
         "wakes_one_per_slot"),
    ),
    Mutation(
        "wake-ignores-token", "lua/wake.lua",
        "if meta and token and tonumber(meta.token) == token then",
        "if meta and token then",
        "wake.lua wakes a job whatever run's token the waiter entry carries (a stale "
        "wake moves a job it no longer concerns)",
        (f"{RATES}::test_the_wake_is_fenced_by_the_refused_runs_token_and_idempotent",),
    ),
    Mutation(
        "wake-ignores-state", "lua/wake.lua",
        "if meta.state == 'scheduled' and redis.call('ZREM', scheduled_key, id) == 1 then",
        "if true then",
        "wake.lua puts a job in the ready set whatever its state (a leased or "
        "queued job is moved)",
        (f"{RATES}::test_the_wake_is_fenced_by_the_refused_runs_token_and_idempotent",),
    ),
    Mutation(
        "release-ignores-wake-mark", "lua/release.lua",
        "if delay > 0 and redis.call('ZREM', woken_key, id .. ':' .. int(token)) == 1 then",
        "if false then",
        "release.lua ignores a wake that came while the run was still leased: the "
        "job waits out its fallback though its slot is free (the lost-wake race)",
        (f"{RATES}::test_the_wake_is_fenced_by_the_refused_runs_token_and_idempotent",),
    ),
    Mutation(
        "keyed-run-polls", "leasequeue/runtime/executor.py",
        "        elif full.waiting_s > 0:\n",
        "        elif False:\n",
        "a run registered as a waiter goes back after slot_backoff, not its fallback "
        "delay: it polls again",
        (f"{RATES}::test_a_waiting_job_is_claimed_at_most_twice_however_long_the_holder_"
         "runs[redis]",),
    ),
    Mutation(
        "local-limiter-keeps-waiters", "leasequeue/limiter.py",
        "        if removed and name in self._waiters:\n",
        "        if False:\n",
        "the in-process limiter frees the slot but wakes none of the key's waiters",
        (f"{RATES}::test_a_job_waiting_for_its_key_starts_when_the_slot_frees[local]",),
    ),
    Mutation(
        "wake-crosses-prefixes", "leasequeue/runtime/limits.py",
        "            if (prefix == self._prefix and isinstance(queue, str)",
        "            if (isinstance(queue, str)",
        "a worker wakes waiter entries of another queue prefix (another service on "
        "the shared limiter prefix) on its own queues",
        (f"{RATES}::test_a_wake_goes_to_the_waiters_queue_of_this_prefix_only",),
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
        "stop-waits-for-renewals", "leasequeue/runtime/heartbeater.py",
        "            wake = now + self.interval if deadline is None else \\\n"
        "                min(deadline, now + self.interval)\n",
        "            wake = now + self.interval + self._p.lease_s\n",
        "the heartbeater checks deadlines only after each beat's renewals, not at the deadline",
        (f"{RUNTIME}::test_a_run_stops_at_its_own_deadline_while_renewals_hang",),
    ),
    Mutation(
        "rate-ahead-past-half-burst", "lua/rate.lua",
        "  while granted < ahead and math.max(tat, real) + interval - v <= tolerance / 2 do\n",
        "  while granted < ahead do\n",
        "rate.lua grants starts ahead past half the burst (a key near its limit would be "
        "spent ahead, in clumps)",
        ("tests/test_rate_limits.py::test_starts_ahead_only_while_half_the_burst_stays_free",),
    ),
    Mutation(
        "refund-frees-reserved-instant", "lua/rate.lua",
        "    tat = math.max(v, booked, tat - interval)\n",
        "    tat = math.max(v, tat - interval)\n",
        "rate.lua's refund moves tat back past held reservations (a reserved instant is "
        "granted twice)",
        ("tests/test_rate_limits.py::test_a_refund_never_frees_a_reserved_instant",),
    ),
    Mutation(
        "claim-ignores-parked-groups", "lua/claim.lua",
        "      if next_us and next_us > now_us_ + 50000 then  -- more than 50 ms ahead: parked\n",
        "      if false then\n",
        "claim.lua leases every job of a parked rate group (a busy key's backlog is swept "
        "through the workers ahead of the other keys)",
        ("tests/test_rate_limits.py::test_a_claim_parks_a_busy_keys_jobs_one_interval_apart",
         "tests/test_rate_limits.py::test_one_busy_key_does_not_starve_the_others"),
    ),
    Mutation(
        "parked-jobs-not-spaced", "lua/claim.lua",
        "  park[1] = park[1] + park[2]\n",
        "  park[1] = park[1]\n",
        "claim.lua parks a group's jobs all at one instant, not one interval apart (they "
        "come due in a clump)",
        ("tests/test_rate_limits.py::test_a_claim_parks_a_busy_keys_jobs_one_interval_apart",),
    ),
    Mutation(
        "parked-job-parked-again", "lua/claim.lua",
        "  meta.grp = nil  -- parked once\n",
        "",
        "claim.lua parks a job again when it comes due (it never runs while its key is "
        "busy)",
        ("tests/test_rate_limits.py::test_a_parked_job_is_parked_once_then_leased",),
    ),
    Mutation(
        "release-keeps-park-group", "lua/release.lua",
        "      if unpark then\n        meta.grp = nil\n      end\n",
        "",
        "release.lua keeps the park group of a job that waits for its reservation (a claim "
        "would park it instead of letting it redeem the reservation)",
        ("tests/test_rate_limits.py::test_a_claim_parks_a_busy_keys_jobs_one_interval_apart",),
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
        "            outcome = await execute(run, definition, kwargs, self._p.threads, scopes)\n"
        "        finally:\n"
        "            self._p.table.returned(run)\n"
        "            if run.slots:\n"
        "                await self._p.limits.release(run)  # only now: its thread has returned\n",
        "        await self._p.limits.release(run)\n"
        "        try:\n"
        "            outcome = await execute(run, definition, kwargs, self._p.threads, scopes)\n"
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
        "claimer-yields-in-a-backlog", "leasequeue/runtime/claimer.py",
        "                if got and not (backlog and self._slots.free >= threshold):\n",
        "                if got:\n",
        "a claim that came back full (a backlog) yields before the next claim: the woken "
        "executors run the whole batch first, and the worker and Redis take turns",
        (f"{RUNTIME}::test_in_a_backlog_the_next_claim_is_sent_before_the_batch_runs",),
    ),
    Mutation(
        "claimer-claims-before-handing-over", "leasequeue/runtime/claimer.py",
        "                if got and not (backlog and self._slots.free >= threshold):\n",
        "                if got and not self._slots.free:\n",
        "a claim that found the queue short still sends the next claim before its jobs "
        "reach their executors: that claim's client work sits on every job's way to its "
        "handler",
        (f"{RUNTIME}::test_jobs_handed_over_reach_their_executors_before_the_next_claim_is_sent",),
    ),
    Mutation(
        "claimer-new-claim-id", "leasequeue/runtime/claimer.py",
        'claim_id = self._unanswered.get(queue) or f"{self._claim_prefix}{next(self._claims)}"',
        'claim_id = f"{self._claim_prefix}{next(self._claims)}"',
        "the claimer sends an unanswered claim again under a new claim id",
        (f"{RUNTIME}::test_a_claim_without_a_reply_is_sent_again_with_the_same_claim_id",),
    ),
    # -- security ---------------------------------------------------------------
    Mutation(
        "url-password-shown", "leasequeue/errors.py",
        "        self.url = redact_url(url)  # never the password (see leasequeue/redact.py)\n",
        "        self.url = url\n",
        "RedisUnavailable names the URL with its password",
        ("tests/test_security_secrets.py::test_unreachable_host_error_has_no_password",),
    ),
    Mutation(
        "payload-depth-unchecked", "leasequeue/codec.py",
        '        if size > MAX_DEPTH:\n'
        '            _check_depth(value[3], size, job_id, "payload")\n',
        "",
        "a stored payload nested deeper than 100 levels (within msgpack's own limit of "
        "1024) is decoded and handed to the handler",
        ("tests/test_security_payloads.py::test_hostile_bytes_are_malformed_without_allocating"
         "_what_they_claim",),
    ),
    # -- the dashboard ----------------------------------------------------------------
    Mutation(
        "dashboard-no-autoescape", "leasequeue/dashboard/server.py",
        "autoescape=True, undefined=StrictUndefined)",
        "autoescape=False, undefined=StrictUndefined)",
        "the dashboard's templates show payloads, ids, errors and logs unescaped",
        ("tests/test_dashboard.py::test_every_page_escapes_payloads_ids_errors_and_logs",),
    ),
    Mutation(
        "dashboard-csrf-ignored", "leasequeue/dashboard/server.py",
        'if not identity.bearer and not self.guard.csrf_ok(request, _one(form, "csrf")):',
        "if False:",
        "the dashboard accepts a signed-in browser's form without its CSRF token",
        ("tests/test_dashboard.py::test_signed_in_forms_need_their_csrf_token",
         "tests/test_dashboard.py::test_basic_auth"),
    ),
    Mutation(
        "hook-error-escapes", "leasequeue/hooks.py",
        "            except Exception as exc:  # a hook never changes what happens to a job\n",
        "            except ArithmeticError as exc:\n",
        "a hook that raises is not caught: its exception reaches the enqueue or the worker",
        ("tests/test_hooks.py::test_a_raising_hook_never_loses_a_job",),
    ),
    Mutation(
        "envelope-drops-headers", "leasequeue/codec.py",
        '        if headers:\n            extra["headers"] = headers\n',
        "",
        "the payload envelope does not carry the hooks' headers (no trace context reaches the run)",
        ("tests/test_tracing.py::test_the_run_span_is_a_child_of_the_producer_span",
         "tests/test_hooks.py::test_hooks_see_every_way_a_run_ends"),
    ),
    # -- the resilience kit (checkpoints, progress, sagas) --------------------------
    Mutation(
        "runstate-ignores-token", "lua/runstate.lua",
        "if not meta or meta.state ~= 'leased' or tonumber(meta.token) ~= token then",
        "if not meta or meta.state ~= 'leased' then",
        "runstate.lua lets a stale run write checkpoints, saga steps and progress",
        (f"{KIT}::test_a_stale_token_cannot_write_checkpoints_saga_or_progress",
         f"{KIT}::test_a_stale_run_gets_lease_lost_from_its_checkpoint"),
    ),
    Mutation(
        "progress-not-coalesced", "leasequeue/runtime/runstate.py",
        "            p.next_at = time.monotonic() + self._p.progress_interval\n",
        "            p.next_at = 0.0\n",
        "every ctx.progress call is written to Redis (no interval)",
        (f"{KIT}::test_ten_thousand_progress_calls_make_few_writes_and_the_last_lands",),
    ),
    Mutation(
        "saga-redoes-done-steps", "leasequeue/saga.py",
        "            if step.name in done:  # recorded by an earlier run: skipped\n",
        "            if False:\n",
        "a resumed saga runs the steps an earlier run recorded as done again",
        (f"{KIT}::test_a_saga_killed_between_steps_resumes_and_completes",),
    ),
    Mutation(
        "saga-restarts-compensation", "leasequeue/saga.py",
        "            if state != StepState.DONE:\n                continue\n",
        "            if state not in (StepState.DONE, StepState.UNDONE):\n"
        "                continue\n",
        "a resumed compensation undoes the steps already undone again",
        (f"{KIT}::test_a_saga_killed_mid_compensation_ends_fully_compensated",),
    ),
    # -- the resilience kit ---------------------------------------------------------
    Mutation(
        "breaker-probes-everyone", "lua/breaker_check.lua",
        "if probe == '' or probe_until <= now then",
        "if true then",
        "breaker_check.lua lets every caller through as a probe once the cooldown ended",
        (f"{BREAKERS}::test_half_open_lets_exactly_one_probe_through_and_its_success_closes_it",),
    ),
    Mutation(
        "breaker-held-runs-start", "leasequeue/runtime/executor.py",
        "            if hold is not None:\n",
        "            if hold is None and hold is not None:\n",
        "the executor starts runs whose breaker is open",
        (f"{BREAKERS}::test_a_run_held_back_spends_no_attempt_and_is_due_when_it_half_opens",),
    ),
    Mutation(
        "resource-open-overwrites-holder", "lua/resource_open.lua",
        "if e[2] then",
        "if false then",
        "resource_open.lua records a key another (live) run holds as the new run's",
        (f"{RESOURCES}::test_a_key_held_by_a_live_run_is_never_swept",
         f"{RESOURCES}::test_a_resource_opened_twice_by_racing_runs_is_closed_exactly_once_in_effect"),
    ),
    Mutation(
        "resource-claim-unfenced", "lua/resource_claim.lua",
        "if (e[4] or '') ~= '' and e[4] ~= closer and until_ms > now then",
        "if false then",
        "resource_claim.lua lets a second closer take an entry another closer holds",
        (f"{RESOURCES}::test_racing_reconcilers_close_once_and_a_lapsed_closer_lets_another_close_again",),
    ),
    # -- the audit trail and the command line -----------------------------------
    Mutation(
        "audit-loses-str8-correlation", "lua/_lib.lua",
        "    len, first = string.byte(envelope, 4), 5\n",
        "    return ''\n",
        "the audit trail drops correlation ids of 32-255 bytes (a msgpack str8)",
        ("tests/test_audit.py::test_correlation_ids_of_every_length_are_read_from_the_payload",),
    ),
    Mutation(
        "audit-origin-is-the-holder", "lua/cancel.lua",
        "'operator:cancel', jobs_key,\n       payloads_key)\n  finish(",
        "'worker:' .. meta.worker, jobs_key,\n       payloads_key)\n  finish(",
        "a canceled job's audit entry names its last worker, not the operator",
        ("tests/test_audit.py::test_each_entry_says_who_and_carries_the_correlation_id",),
    ),
    Mutation(
        "replay-cli-forgets-missing-ids", "leasequeue/cli.py",
        "        if missed:\n",
        "        if False:\n",
        "`dead replay ID` exits 0 for ids it did not replay",
        ("tests/test_cli_newuser.py::test_dead_replay_of_unknown_ids_exits_non_zero_and_names_them",),
    ),
    # -- rate limits ----------------------------------------------------------------
    Mutation(
        "rate-reservation-not-kept", "lua/rate.lua",
        "  redis.call('ZADD', reserved_key, int(allowed_at), holder)\n",
        "",
        "rate.lua tells a run over the rate to wait but keeps no reservation: it competes "
        "again when it comes back, and a backlog bounces through the queue",
        (f"{RATES}::test_a_reservation_is_kept_until_due_then_redeemed_once",),
    ),
    Mutation(
        "rate-push-ignores-reservations", "lua/rate.lua",
        "  shift = shift + delta\n",
        "",
        "a RateLimited push back moves the next free start but not the runs already "
        "reserved, which start during the provider's pause",
        (f"{RATES}::test_push_back_moves_the_budget_and_every_reservation",),
    ),
    # -- group commit of concurrent enqueues ------------------------------------------
    Mutation(
        "coalesced-reply-to-wrong-caller", "leasequeue/store/coalesce.py",
        "else ids, replies, strict=True)",
        "else ids, replies[::-1], strict=True)",
        "a batch of concurrent enqueues answers each caller with another caller's "
        "reply (created / state)",
        ("tests/test_coalesce.py::test_each_caller_gets_its_own_reply",),
    ),
    Mutation(
        "coalesced-id-to-wrong-caller", "leasequeue/store/coalesce.py",
        "else ids, replies, strict=True)",
        "else ids[::-1], replies, strict=True)",
        "a batch of App.enqueue's common calls answers each caller with the id drawn for "
        "another caller's job",
        ("tests/test_coalesce.py::test_common_calls_get_ids_drawn_as_their_batch_is_sent",),
    ),
    Mutation(
        "coalesced-given-ids-redrawn", "leasequeue/store/coalesce.py",
        "    if any(map(_ID, batch)):  # a batch of both kinds",
        "    if False:  # a batch of both kinds",
        "a batch holding common calls and calls with their own job_id draws fresh ids for "
        "every job: a given job_id is not the one stored",
        ("tests/test_coalesce.py::"
         "test_a_batch_of_common_calls_and_given_ids_keeps_the_given_ones",),
    ),
    Mutation(
        "coalesced-cancelled-caller-stops-the-answers", "leasequeue/store/coalesce.py",
        "            if future.done():\n"
        "                continue\n"
        "            callbacks = future._callbacks",
        "            callbacks = future._callbacks",
        "a caller cancelled once its batch was sent stops the batch's answers at it "
        "(InvalidStateError ends answer_all's handle, reported to the loop): the callers after "
        "it are answered only by its last resort",
        ("tests/test_coalesce.py::"
         "test_answer_all_runs_a_lone_callback_in_its_context_and_leaves_the_rest_to_the_loop",),
    ),
    Mutation(
        "coalesced-lone-call-wrong-id", "leasequeue/store/coalesce.py",
        "        return job.id, reply\n",
        "        return new_job_id(), reply\n",
        "the lone call of App.enqueue's common call answers its caller with an id other "
        "than the one its job was stored under",
        ("tests/test_coalesce.py::"
         "test_a_batch_of_common_calls_and_given_ids_keeps_the_given_ones",),
    ),
    Mutation(
        "coalesced-old-loop-counts-out", "leasequeue/store/coalesce.py",
        "        if epoch != lane.epoch:\n            return\n",
        "",
        "a call left in flight by a closed event loop, ending later, counts itself out of "
        "the lane the next loop reset: its counts go below zero and its enqueues wait forever",
        ("tests/test_coalesce.py::"
         "test_a_lane_reset_for_a_new_loop_is_not_counted_out_by_the_old_loop_s_call",),
    ),
    Mutation(
        "coalesced-ids-drawn-per-call", "leasequeue/app.py",
        "                common = self.producer.common(name, payload, True)\n",
        "                common = self.producer.common(name, payload, False)\n",
        "App.enqueue's common call draws its job's id itself, one os.urandom read a job, "
        "instead of its batch's one read at the send",
        ("tests/test_coalesce.py::test_common_calls_get_ids_drawn_as_their_batch_is_sent",),
    ),
    Mutation(
        "enqueue-common-skips-shard-check", "leasequeue/app.py",
        "                if logical_queue not in self._verified:  # (a plain queue: "
        "never \"q#k\")\n                    await self._verify_once(logical_queue)\n",
        "",
        "App.enqueue's common call goes its short way on a queue never checked: a queue "
        "Redis records with 3 shards takes this App's jobs into keys no worker reads",
        (f"{COMMON}::test_a_queue_s_first_common_call_checks_its_recorded_shard_count",),
    ),
    Mutation(
        "enqueue-common-ignores-hooks", "leasequeue/app.py",
        "        if not options and not self.hooks.wants_enqueue:\n",
        "        if not options:\n",
        "App.enqueue's common call goes its short way with a hook that asks for enqueues: "
        "before_enqueue and after_enqueue never see it",
        ("tests/test_hooks.py::test_enqueue_hooks_see_the_common_call",),
    ),
    Mutation(
        "enqueue-drops-job-id", "leasequeue/producer.py",
        'options.get("job_id")',
        "None",
        "an enqueue call's job_id is dropped: the job gets a fresh id, "
        "and enqueueing it twice makes two jobs",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-queue", "leasequeue/producer.py",
        'options.get("queue")',
        "None",
        "an enqueue call's queue is dropped: the job lands in its name's default queue",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-delay", "leasequeue/producer.py",
        'options.get("delay", NO_DELAY)',
        "NO_DELAY",
        "an enqueue call's delay is dropped: the job is ready at once",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-priority", "leasequeue/producer.py",
        'options.get("priority", NO_PRIORITY)',
        "NO_PRIORITY",
        "an enqueue call's priority is dropped: the job keeps the default priority",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-correlation-id", "leasequeue/producer.py",
        'options.get("correlation_id")',
        "None",
        "an enqueue call's correlation id is dropped: the id is never stored, "
        "the job correlates to itself",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-request-id", "leasequeue/producer.py",
        'options.get("request_id")',
        "None",
        "an enqueue call's request id is dropped: the id is never stored",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-max-attempts", "leasequeue/producer.py",
        'options.get("max_attempts")',
        "None",
        "an enqueue call's max_attempts is dropped: the budget is never stored, "
        "the handler's decides",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-drops-max-infra-attempts", "leasequeue/producer.py",
        'options.get("max_infra_attempts")',
        "None",
        "an enqueue call's max_infra_attempts is dropped: the budget is never stored, "
        "the handler's decides",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-delay-default-not-the-marker", "leasequeue/producer.py",
        'options.get("delay", NO_DELAY)',
        'options.get("delay", 0)',
        "an enqueue call's delay left out is the int 0, not NO_DELAY: Producer.one "
        "checks a shape for every such call instead of taking the cached default one",
        (f"{COMMON}::test_an_option_left_out_is_its_default_the_very_default_objects",),
    ),
    Mutation(
        "enqueue-priority-default-wrong", "leasequeue/producer.py",
        'options.get("priority", NO_PRIORITY)',
        'options.get("priority", 1)',
        "an enqueue call that gives an option but no priority stores priority 1, not the "
        "default 0",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",
         f"{COMMON}::test_an_option_left_out_is_its_default_the_very_default_objects"),
    ),
    Mutation(
        "enqueue-common-ignores-options", "leasequeue/app.py",
        "        if not options and not self.hooks.wants_enqueue:\n",
        "        if not self.hooks.wants_enqueue:\n",
        "App.enqueue's common call goes its short way whatever options it is given: a job id, "
        "a queue, a delay... are never stored",
        (f"{COMMON}::test_every_option_beside_the_name_takes_the_long_way",),
    ),
    Mutation(
        "enqueue-unknown-option-ignored", "leasequeue/producer.py",
        "    if not options.keys() <= ENQUEUE_OPTIONS:\n",
        "    if False:\n",
        "an enqueue option that is none of EnqueueOptions' (a typo: dealy=5) is ignored, and "
        "the job is enqueued without it",
        (f"{COMMON}::test_an_unknown_option_is_refused_by_name_and_writes_nothing",),
    ),
    Mutation(
        "common-empty-under-any-limit", "leasequeue/producer.py",
        "        if payload is None and self.max_payload_bytes > 0:\n",
        "        if payload is None:\n",
        "Producer.common stores no payload under a size limit below one byte, which "
        "encode_envelope refuses: a SyncApp with max_payload_bytes=0 writes what it refused",
        (f"{COMMON}::test_no_payload_under_a_limit_below_one_byte_is_refused_as_before",),
    ),
    Mutation(
        "common-drops-payload", "leasequeue/producer.py",
        "        if payload is None and self.max_payload_bytes > 0:\n",
        "        if self.max_payload_bytes > 0:\n",
        "Producer.common stores every job of the common call with no payload: its "
        "handler gets none of its arguments",
        (f"{COMMON}::test_the_common_call_stores_what_the_long_way_stores",),
    ),
    Mutation(
        "common-empty-any-version", "leasequeue/producer.py",
        "            if version == self.registry.version:\n"
        "                answer = empties.get(name)\n",
        "            if True:\n"
        "                answer = empties.get(name)\n",
        "Producer.common's cached job of a name outlives a registration that moves the "
        "name to another queue: its calls go on to the old queue",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "common-empty-kept-on-new-shards", "leasequeue/producer.py",
        "        self._plains = (self.registry.version, {})\n"
        "        self.empty_jobs = (self.registry.version, {})\n",
        "        self._plains = (self.registry.version, {})\n",
        "Producer.common's cached job of a name outlives shards set for its queue: its "
        "calls go on to the unsharded queue's keys, which no worker of the sharded one reads",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "common-empty-for-a-payload", "leasequeue/producer.py",
        "        if payload is None and id_at_send and name.__class__ is str:\n",
        "        if id_at_send and name.__class__ is str:\n",
        "a common call with a payload gets the name's cached job of no payload: its "
        "handler gets none of its arguments",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "common-empty-for-an-id-now", "leasequeue/producer.py",
        "        if payload is None and id_at_send and name.__class__ is str:\n",
        "        if payload is None and name.__class__ is str:\n",
        "a common call whose job needs its id now (SyncApp's, which no sender draws for) "
        "gets the cached job with no id",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "common-empty-any-name", "leasequeue/producer.py",
        "        if payload is None and id_at_send and name.__class__ is str:\n",
        "        if payload is None and id_at_send:\n",
        "a name that is not a str gets the cached job of a str equal to it, and a name "
        "that cannot be hashed raises TypeError from the cache, not the long way's answer",
        (f"{COMMON}::test_a_name_that_is_not_a_str_never_gets_the_cached_job",),
    ),
    Mutation(
        "common-empty-never-cached", "leasequeue/producer.py",
        "        answer = empties[name] = (logical_queue, keys, _new(NewJob, (\n",
        "        answer = (logical_queue, keys, _new(NewJob, (\n",
        "Producer.common makes the commonest call's job anew each call: the cache is "
        "never filled",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "common-empty-cached-with-an-id", "leasequeue/producer.py",
        "            \"\", name, _EMPTY, delay_ms, prio, attempts, infra, \"\")))\n",
        "            new_job_id(), name, _EMPTY, delay_ms, prio, attempts, infra, \"\")))\n",
        "the cached job of a name carries an id: every common call with no payload "
        "sends that one id, and all but the first are answered 'existed'",
        (f"{COMMON}::test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route",),
    ),
    Mutation(
        "name-cache-unbounded-names-checked", "leasequeue/producer.py",
        "            if len(self._names_ok) >= CACHED_NAMES:\n",
        "            if False:\n",
        "the set of job names already checked grows with every new name a producer is "
        "given: no bound",
        (f"{COMMON}::test_ever_new_names_keep_each_cache_by_name_within_its_bound",),
    ),
    Mutation(
        "name-cache-unbounded-shapes", "leasequeue/producer.py",
        "            if len(shapes) >= CACHED_NAMES:  # ever new names: start again\n",
        "            if False:\n",
        "default_shape's cache grows with every new name (and name and queue pair) a "
        "producer is given: no bound",
        (f"{COMMON}::test_ever_new_names_keep_each_cache_by_name_within_its_bound",),
    ),
    Mutation(
        "name-cache-unbounded-common-entries", "leasequeue/producer.py",
        "            if len(plains) >= CACHED_NAMES:  # ever new names: start again\n",
        "            if False:\n",
        "the common call's entries by name grow with every new name a producer is given: no bound",
        (f"{COMMON}::test_ever_new_names_keep_each_cache_by_name_within_its_bound",),
    ),
    Mutation(
        "name-cache-unbounded-commonest-jobs", "leasequeue/producer.py",
        "        if len(empties) >= CACHED_NAMES:  # ever new names: start again\n",
        "        if False:\n",
        "the commonest call's jobs by name grow with every new name a producer is given: no bound",
        (f"{COMMON}::test_ever_new_names_keep_each_cache_by_name_within_its_bound",),
    ),
    Mutation(
        "enqueue-args-empty-id", "leasequeue/store/scripts.py",
        "        if not all(map(_ID, jobs)):\n",
        "        if False:\n",
        "enqueue's arguments take a job with no id: a sender that forgot to draw it "
        "writes the job under an empty id",
        ("tests/test_coalesce.py::test_a_job_with_no_id_is_never_sent",),
    ),
    Mutation(
        "batch-ids-overlap", "leasequeue/ids.py",
        "    return raw.hex(\" \", ID_BYTES).split(\" \") if raw else []\n",
        "    return [raw.hex()[at:at + 2 * ID_BYTES] for at in range(0, len(raw), ID_BYTES)]\n",
        "a batch's ids drawn at the send overlap: each shares half its characters with the "
        "next",
        ("tests/test_coalesce.py::test_ids_at_send_draws_only_the_missing_ones",),
    ),
    Mutation(
        "coalesced-take-sends-cancelled", "leasequeue/store/coalesce.py",
        "        if not any(map(_DONE, taken)):",
        "        if True:",
        "the next batch call of concurrent enqueues takes its callers by the slice without "
        "looking for cancelled ones: a caller cancelled while it waited has its job written",
        ("tests/test_coalesce.py::test_a_cancelled_caller_takes_nothing_from_the_others",),
    ),
    Mutation(
        "coalesced-take-ignores-bytes", "leasequeue/store/coalesce.py",
        "sum(map(len, map(_PAYLOAD, batch))) <= self.max_bytes:",
        "sum(map(len, map(_PAYLOAD, batch))) <= self.max_bytes * 1000:",
        "a batch call of concurrent enqueues takes its callers by the slice whatever their "
        "payloads add up to: one script call carries far more than max_bytes",
        ("tests/test_coalesce.py::test_a_batch_s_payloads_add_up_to_max_bytes_at_most",),
    ),
    Mutation(
        "coalesced-take-all-callers", "leasequeue/store/coalesce.py",
        "(lane.sent + len(jobs) + 1) // 2)",
        "(lane.sent + len(jobs) + 1))",
        "a batch call of concurrent enqueues takes every waiting caller instead of half of "
        "the queue's callers: the client and Redis take turns instead of overlapping",
        ("tests/test_coalesce.py::"
         "test_callers_of_one_turn_go_beside_the_call_in_flight_and_the_rest_wait",),
    ),
    Mutation(
        "coalesced-calls-unbounded", "leasequeue/store/coalesce.py",
        "while lane.jobs and lane.calls < CALLS_IN_FLIGHT and loop is not None:",
        "while lane.jobs and loop is not None:",
        "the coalescer sends every waiting caller at once, in as many calls as it takes, "
        "however many calls are in flight: no bound of two per queue",
        ("tests/test_coalesce.py::"
         "test_callers_of_one_turn_go_beside_the_call_in_flight_and_the_rest_wait",),
    ),
    Mutation(
        "coalesced-waits-for-the-reply", "leasequeue/store/coalesce.py",
        "                if not lane.due and lane.calls < CALLS_IN_FLIGHT:\n",
        "                if not lane.due and lane.calls < 1:\n",
        "a caller that finds one call in flight waits for its reply instead of going "
        "beside it at the end of the turn (one call in flight at a time)",
        ("tests/test_coalesce.py::"
         "test_callers_of_one_turn_go_beside_the_call_in_flight_and_the_rest_wait",),
    ),
    Mutation(
        "coalesced-park-in-a-forked-child", "leasequeue/store/coalesce.py",
        "            if (loop is not None and lane.forks == _FORKS[0]\n",
        "            if (loop is not None\n",
        "a forked child's enqueue parks on its copy of the parent's loop (a task of it "
        "mid-step at the fork), which no one runs there: the child's enqueues are never "
        "answered",
        ("tests/test_coalesce.py::test_a_forked_child_never_parks_on_its_parent_s_loop",),
    ),
    Mutation(
        "coalesced-park-on-a-closed-loop", "leasequeue/store/coalesce.py",
        "                    and task_of(loop) is not None):\n",
        "                    ):\n",
        "an enqueue parks on its lane's loop without asking whether that loop is the one "
        "stepping it: behind a call left in flight by a closed loop, it never goes",
        ("tests/test_coalesce.py::"
         "test_a_lane_reset_for_a_new_loop_is_not_counted_out_by_the_old_loop_s_call",),
    ),
    Mutation(
        "coalesced-park-asks-the-running-loop", "leasequeue/store/coalesce.py",
        "            loop = lane.loop\n            # the lane's loop",
        "            loop = lane.loop if asyncio.get_running_loop() else None\n"
        "            # the lane's loop",
        "every enqueue that parks behind a call in flight asks for the running loop (a "
        "getpid() system call a job on Python 3.11)",
        ("tests/test_coalesce.py::test_a_parked_caller_does_not_ask_for_the_running_loop",),
    ),
    Mutation(
        "coalesced-park-the-long-way", "leasequeue/store/coalesce.py",
        "                    and task_of(loop) is not None):\n",
        "                    and task_of(loop) is not None and False):\n",
        "a caller that finds a call in flight never parks at once: each makes a coroutine "
        "of its own that asks for the running loop before it parks",
        ("tests/test_coalesce.py::test_a_parked_caller_does_not_ask_for_the_running_loop",),
    ),
    Mutation(
        "coalesced-lone-asks-the-running-loop", "leasequeue/store/coalesce.py",
        "        loop = lane.loop\n        if loop is None or lane.forks",
        "        loop = None\n        if loop is None or lane.forks",
        "every lone enqueue asks for the running loop (a getpid() system call a call on "
        "Python 3.11), though its lane's loop is the one stepping it",
        ("tests/test_coalesce.py::"
         "test_a_lone_call_on_its_lane_s_loop_does_not_ask_for_the_running_loop",),
    ),
    Mutation(
        "coalesced-lone-in-a-forked-child", "leasequeue/store/coalesce.py",
        "        if loop is None or lane.forks != _FORKS[0] or task_of(loop) is None:\n",
        "        if loop is None or task_of(loop) is None:\n",
        "a forked child's lone enqueue takes its copy of the parent's loop (a task of it "
        "mid-step at the fork) for the running one: it parks on a loop no one runs",
        ("tests/test_coalesce.py::test_a_forked_child_never_parks_on_its_parent_s_loop",),
    ),
    # -- batch enqueue: runs and the pipeline -------------------------------------------
    Mutation(
        "enqueue-run-keeps-first-options", "leasequeue/store/scripts.py",
        "        if this != shape:\n",
        "        if shape is None:\n",
        "enqueue_args puts a whole batch in one run: every job gets the first job's name, "
        "delay, priority and budgets",
        (f"{SCRIPTS}::test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_own_options",),
    ),
    Mutation(
        "enqueue-run-reads-wrong-payload", "lua/enqueue.lua",
        "      local payload = step == 2 and ARGV[i + 1] or shared\n",
        "      local payload = step == 2 and ARGV[run + RUN_HEAD + 1] or shared\n",
        "enqueue.lua stores the first payload of a run for every job of it",
        (f"{SCRIPTS}::test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_own_options",),
    ),
    Mutation(
        "enqueue-run-shares-unequal-payloads", "leasequeue/store/scripts.py",
        "        elif payload is not None and j.payload is not payload and j.payload != payload:\n",
        "        elif False:\n",
        "enqueue_args sends a run's first payload once for all its jobs, whatever "
        "their own payloads: every job of the run is written with the first one's",
        (f"{SCRIPTS}::test_a_run_of_one_payload_sends_it_once_and_every_job_keeps_it",),
    ),
    Mutation(
        "enqueue-one-run-ignores-shapes", "leasequeue/store/scripts.py",
        "                        or (len(set(map(_RUN_SHAPE, jobs))) == 1\n",
        "                        or (True\n",
        "enqueue_args takes any batch of one payload for one run: every job gets the first "
        "job's name, delay, priority and budgets",
        (f"{SCRIPTS}::test_a_batch_of_one_run_packs_as_the_runs_loop_does",),
    ),
    Mutation(
        "enqueue-alike-by-the-first-job", "leasequeue/store/scripts.py",
        "(ids is not None and jobs.count(first) == len(jobs))",
        "(ids is not None and jobs.count(first) >= 1)",
        "enqueue_args takes a batch whose ids were drawn at the send for one run of its "
        "first job when any job is like it: every job gets the first's name, shape and payload",
        (f"{SCRIPTS}::test_a_batch_of_one_run_packs_as_the_runs_loop_does",),
    ),
    Mutation(
        "enqueue-one-run-ignores-payloads", "leasequeue/store/scripts.py",
        "                            and all(map(eq, map(_PAYLOAD, jobs), repeat(payload))))):\n",
        "                            and True)):\n",
        "enqueue_args sends the first job's payload for a whole batch of one shape: "
        "every job is written with it",
        (f"{SCRIPTS}::test_a_batch_of_one_run_packs_as_the_runs_loop_does",),
    ),
    Mutation(
        "enqueue-run-ignores-shared-payload", "lua/enqueue.lua",
        "  local step = ARGV[at + 7] == '' and 2 or 1\n",
        "  local step = 2\n",
        "enqueue.lua reads every run as (id, payload) pairs: a run that sends its "
        "payload once has its ids read as payloads and its jobs misnamed",
        (f"{SCRIPTS}::test_a_run_of_one_payload_sends_it_once_and_every_job_keeps_it",),
    ),
    Mutation(
        "enqueue-seq-text-stale-tens", "lua/enqueue.lua",
        "      if seq - digit ~= tens then\n",
        "      if tens < 0 then\n",
        "a batch writes its records' sequence numbers from the tens of its first job: "
        "past the next ten the number in the record is not the one the counter gave",
        (f"{SCRIPTS}::test_a_batch_numbers_its_records_in_sequence_across_tens",),
    ),
    Mutation(
        "wait-claim-lease-not-capped", "leasequeue/runtime/claimer.py",
        "            block_for = min(timeout, self._p.lease_ms / 4000)\n",
        "            block_for = timeout\n",
        "an idle wait with the claim behind it lasts up to 1 s whatever the lease: a job "
        "that comes late in it arrives with its lease (dated from the send) nearly spent, "
        "is refused a start and goes back to the queue",
        ("tests/test_wait_then_claim.py::test_a_job_arriving_at_the_end_of_a_long_wait_"
         "keeps_its_lease",),
    ),
    Mutation(
        "wait-hands-over-after-its-scope", "leasequeue/runtime/claimer.py",
        "                    await asyncio.sleep(0)\n        finally:\n",
        "        finally:\n",
        "the idle wait's jobs start only once the claimer has left the wait's shielded "
        "scope and gone back to its loop: about 16 µs more at p50 on an idle worker's way "
        "to a handler",
        ("tests/test_wait_then_claim.py::test_a_job_the_wait_hands_over_starts_before_the_"
         "wait_returns",),
    ),
    Mutation(
        "wait-error-leaves-claim-reply", "leasequeue/store/direct.py",
        "                    with contextlib.suppress(ResponseError):\n"
        "                        await _read(conn)\n",
        "",
        "an error reply to the idle wait's BLPOP leaves the claim's reply unread on the "
        "connection: the next call on it reads a late reply (another worker gets this "
        "one's jobs)",
        ("tests/test_wait_then_claim.py::test_an_error_reply_to_the_wait_keeps_the_"
         "connection_in_step",),
    ),
    Mutation(
        "wait-claim-marks-started", "leasequeue/runtime/claimer.py",
        "                    self._p.lease_ms, self._p.worker_id, 0, claim_id)\n",
        "                    self._p.lease_ms, self._p.worker_id, dispatch.idle_takers,"
        " claim_id)\n",
        "the claim behind an idle wait marks its runs started: a worker frozen in its wait "
        "is charged an attempt for each job that claim took",
        ("tests/test_wait_then_claim_processes.py::test_a_worker_frozen_in_its_wait_is_"
         "charged_no_attempt_for_the_job_it_took",),
    ),
    Mutation(
        "wait-short-claim-claims-again", "leasequeue/runtime/claimer.py",
        "        short = batch.next_due_in_ms if got < count else None\n",
        "        short = batch.next_due_in_ms if not got else None\n",
        "after a wake whose claim emptied the line, the worker sends a claim of its own "
        "before it waits again: it finds nothing, a Redis call per job that trickles in",
        ("tests/test_wait_then_claim.py::test_jobs_that_trickle_in_cost_no_claim_beyond_"
         "the_one_behind_the_wait",),
    ),
    Mutation(
        "wait-full-claim-waits-again", "leasequeue/runtime/claimer.py",
        "        short = batch.next_due_in_ms if got < count else None\n",
        "        short = batch.next_due_in_ms\n",
        "after a wake whose claim took all it asked for, the worker waits for a token "
        "before it claims again: the jobs behind (more than the tokens a queue keeps) "
        "wait for tokens or the idle poll",
        ("tests/test_wait_then_claim.py::test_a_wait_whose_claim_comes_back_full_claims_"
         "again_at_once",),
    ),
    Mutation(
        "pipeline-not-resent-after-a-lost-reply", "leasequeue/store/direct.py",
        "            for keys, args in [*pending, *rest]:\n",
        "            for keys, args in rest:\n",
        "a connection lost mid-pipeline drops the calls in flight: their jobs are never "
        "answered (or never written)",
        ("tests/test_direct.py::test_a_lost_reply_mid_pipeline_sends_the_rest_one_by_one_"
         "and_loses_no_job",),
    ),
    # -- the lane's inline hot path (Lane.run) -----------------------------------
    Mutation(
        "lane-inline-noscript-raises", "leasequeue/store/direct.py",
        "                except NoScriptError:\n                    idle.append(conn)\n",
        "                except NoScriptError:\n                    idle.append(conn)\n"
        "                    raise\n",
        "a script call on an idle connection raises NOSCRIPT after a SCRIPT FLUSH or "
        "a restart without persistence, instead of loading the script again",
        ("tests/test_scripts.py::test_noscript_recovery_after_script_flush",),
    ),
    Mutation(
        "lane-inline-retries-twice", "leasequeue/store/direct.py",
        "                    attempts = (2,)  # this was the first attempt\n",
        "                    pass\n",
        "a call on a dropped connection is retried twice, not once: a call sent on "
        "three connections in turn",
        ("tests/test_direct.py::test_a_dropped_connection_is_retried_once_not_more",),
    ),
    Mutation(
        "lane-inline-keeps-a-timed-out-connection", "leasequeue/store/direct.py",
        "                    await self._drop(conn)\n                    if not retry:\n",
        "                    idle.append(conn)\n                    if not retry:\n",
        "a connection whose read timed out goes back to the lane: its late reply is "
        "read as the answer to the next call",
        ("tests/test_direct.py::test_a_reply_later_than_the_socket_timeout_raises_and_"
         "drops_the_connection",),
    ),
    Mutation(
        "lane-inline-drops-after-an-error-reply", "leasequeue/store/direct.py",
        "                    idle.append(conn)  # an error reply was read: the connection "
        "is clean\n",
        "                    await self._drop(conn)\n",
        "an error reply (a script's own error) drops a clean connection: every such "
        "call costs a reconnect",
        ("tests/test_direct.py::test_an_error_reply_keeps_the_connection_in_the_lane",),
    ),
    Mutation(
        "lane-inline-cancel-keeps-connection", "leasequeue/store/direct.py",
        "                except BaseException:\n                    await self._drop(conn)\n",
        "                except BaseException:\n                    idle.append(conn)\n",
        "a call cancelled mid-reply leaves its connection in the lane with the reply "
        "unread: the next call reads it as its own",
        ("tests/test_direct.py::test_a_call_cancelled_mid_reply_does_not_leave_its_reply_"
         "to_the_next",),
    ),
    Mutation(
        "read-timer-never-rearmed", "leasequeue/store/direct.py",
        "            self.handle = self.loop.call_at(self.deadline, self._fire)\n",
        "            pass\n",
        "a connection's read timer that fires during a read not yet due does not re-arm "
        "itself: that read never times out, and a call to a stalled Redis hangs",
        ("tests/test_direct.py::test_a_reply_later_than_the_socket_timeout_raises_and_"
         "drops_the_connection",),
    ),
    Mutation(
        "read-timer-kept-for-a-later-deadline", "leasequeue/store/direct.py",
        "        if handle is None or self.loop is not loop or handle.when() > deadline:\n",
        "        if handle is None or self.loop is not loop:\n",
        "a read timer armed for a long wait's deadline is kept for the reads after it: "
        "a read to a stalled Redis right after a wait cut short waits out the wait's "
        "deadline instead of its own socket timeout",
        ("tests/test_direct.py::test_a_read_after_a_long_wait_cut_short_times_out_at_its_"
         "own_deadline",),
    ),
    Mutation(
        "acl-commands-miss-bulk", "leasequeue/acl.py",
        "(?:redis\\.p?call|bulk)",
        "redis\\.p?call",
        "the roles' commands are read from redis.call only, not from _lib.lua's bulk(): "
        "the worker role has no LPUSH, and a claim past a parked group is refused",
        ("tests/test_security_acl.py::test_a_scripts_commands_include_what_it_sends_through_bulk",
         "tests/test_security_acl.py::test_a_worker_claims_past_a_parked_group_under_its_role"),
    ),
    Mutation(
        "acl-refusal-names-no-keys", "leasequeue/store/translate.py",
        "            names = tuple(k.decode() if isinstance(k, bytes) else k for k in keys)\n",
        "            names = ()\n",
        "a script refused by the ACL for its keys no longer names the keys it declares: "
        "the operator cannot tell which key pattern the user lacks",
        ("tests/test_security_acl.py::test_producer_enqueues_and_reads_but_cannot_claim_ack_"
         "or_purge",),
    ),
    Mutation(
        "sync-lane-keeps-a-timed-out-connection", "leasequeue/store/sync_lane.py",
        "            except (RedisConnectionError, RedisTimeoutError):\n"
        "                self._drop(conn)\n",
        "            except (RedisConnectionError, RedisTimeoutError):\n"
        "                self._idle.append(conn)\n",
        "the sync producer keeps a connection whose read timed out: the late reply waits "
        "on it, and the next call reads it as its own",
        ("tests/test_sync_lane.py::test_a_reply_later_than_the_socket_timeout_is_never_read_"
         "by_the_next_call",),
    ),
    Mutation(
        "sync-lane-no-kernel-read-timeout", "leasequeue/store/sync_lane.py",
        "    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)\n",
        "",
        "the sync producer makes its sockets blocking without the read timeout in the kernel: "
        "a call to a Redis that stalls waits for as long as the stall",
        ("tests/test_sync_lane.py::test_a_reply_later_than_the_socket_timeout_is_never_read_"
         "by_the_next_call",),
    ),
    Mutation(
        "sync-lane-kernel-timeout-as-lost-connection", "leasequeue/store/sync_lane.py",
        "    except (TimeoutError, BlockingIOError):",
        "    except TimeoutError:",
        "the sync producer reads the kernel's timeout (EAGAIN) as a lost connection: the "
        "caller's error no longer says the call timed out",
        ("tests/test_sync_lane.py::test_a_call_the_kernel_times_out_raises_a_timeout",),
    ),
    # -- the job's footprint in Redis --------------------------------------------
    Mutation(
        "job-id-32-chars", "leasequeue/ids.py",
        "ID_BYTES = 14  # random bytes",
        "ID_BYTES = 16  # random bytes",
        "a producer's job ids are 32 hex characters: each of a job's two copies of "
        "its id takes a 48-byte allocation in Redis, not 32",
        (f"{STORE}::test_a_queued_no_op_job_costs_at_most_165_bytes_in_redis",),
    ),
    Mutation(
        "batch-ids-repeat", "leasequeue/producer.py",
        "            for r, job_id in zip(batch, fresh, strict=True):\n",
        "            for r, job_id in zip(batch, [fresh[0]] * len(fresh), strict=True):\n",
        "every job of a batch gets the same fresh id: all but the first are "
        "answered 'existed' and never queued",
        (f"{STORE}::test_a_queued_no_op_job_costs_at_most_165_bytes_in_redis",
         f"{SCRIPTS}::test_a_batch_prepares_every_request_as_prepare_does_alone"),
    ),
    Mutation(
        "batch-plain-skips-limit-keys", "leasequeue/producer.py",
        "plain = keyed is None and infos is None",
        "plain = infos is None",
        "a batch builds a job with a rate keyed by its payload as a plain one: its "
        "limit key is never rendered (no LimitKeyError) and its park group is lost",
        (f"{SCRIPTS}::test_a_batch_prepares_every_request_as_prepare_does_alone",),
    ),
    Mutation(
        "batch-plain-skips-hooks", "leasequeue/producer.py",
        "plain = keyed is None and infos is None",
        "plain = keyed is None",
        "a batch builds its plain jobs without the enqueue hooks: before_enqueue never "
        "sees them and the headers it adds (a trace context) are not stored",
        (f"{SCRIPTS}::test_a_batch_prepares_every_request_as_prepare_does_alone",),
    ),
    Mutation(
        "batch-plain-drops-payload", "leasequeue/producer.py",
        "if (plain and r.payload is None and r.job_id is None",
        "if (plain and r.job_id is None",
        "a batch stores the empty envelope for a request with a payload of its own "
        "among plain ones: its handler runs without its arguments",
        (f"{SCRIPTS}::test_a_batch_prepares_every_request_as_prepare_does_alone",),
    ),
    Mutation(
        "corr-stored-in-full", "leasequeue/producer.py",
        '"" if corr == job_id else corr,',
        "corr or job_id,",
        "the payload repeats the job's id as its correlation id (32 bytes a job more)",
        (f"{STORE}::test_a_queued_no_op_job_costs_at_most_165_bytes_in_redis",
         "tests/test_audit.py::test_a_job_s_own_id_as_its_correlation_id_is_stored_as_empty"),
    ),
    Mutation(
        "payload-inline-unbounded", "lua/enqueue.lua",
        "  local inline = #payload <= INLINE_MAX\n",
        "  local inline = true\n",
        "a one-job enqueue keeps a payload of any size inside the record, which every "
        "claim, renewal and ack then copies",
        (f"{INLINE}::test_a_payload_up_to_1024_bytes_is_in_its_record_a_larger_one_beside_it",),
    ),
    Mutation(
        "encode-meta-drops-payload", "lua/_lib.lua",
        "  if m.payload then\n    tail = tail .. PAYLOAD_MARK .. m.payload\n  end\n",
        "",
        "a record re-encoded from its fields (a failure, a retry, a reap) loses the "
        "payload kept inside it",
        (f"{INLINE}::test_a_payload_holding_bars_and_nuls_survives_every_rewrite",),
    ),
    Mutation(
        "payload-mark-bare-nul", "lua/_lib.lua",
        "local PAYLOAD_MARK = '|\\0'\n",
        "local PAYLOAD_MARK = '\\0'\n",
        "the payload follows the fields after a bare NUL: the code before reads a payload "
        "without '|' as the record's last field and runs the job without it",
        (f"{INLINE}::test_the_code_before_reads_a_record_with_its_payload_inside_as_"
         "malformed",),
    ),
    Mutation(
        "claim-skips-inline-payload", "lua/claim.lua",
        "        payload = v and bar and string.sub(tail, bar + 2)\n",
        "        payload = nil\n",
        "a claim hands out the payloads hash's entry only: a job whose payload is inside "
        "its record (rewritten: version 2) runs with none",
        (f"{INLINE}::test_a_payload_holding_bars_and_nuls_survives_every_rewrite",),
    ),
    Mutation(
        "record-parse-keeps-payload", "leasequeue/store/record.py",
        "    parts = split_record(raw)[0].decode().split(\"|\")\n",
        "    parts = raw.decode().split(\"|\")\n",
        "Python reads the payload inside a record as part of its last field: get_job, "
        "listings and the dashboard call the job malformed",
        (f"{INLINE}::test_a_payload_holding_bars_and_nuls_survives_every_rewrite",),
    ),
    Mutation(
        "corr-empty-read-as-empty", "leasequeue/codec.py",
        "        return Envelope(value[1] or job_id, value[2], value[3])\n",
        "        return Envelope(value[1], value[2], value[3])\n",
        "a stored '' is read back as an empty correlation id, not the job's own id "
        "(the run's context and the job record lose it)",
        ("tests/test_audit.py::test_a_job_s_own_id_as_its_correlation_id_is_stored_as_empty",),
    ),
    Mutation(
        "corr-empty-read-as-empty-lua", "lua/_lib.lua",
        "  if b == 160 then\n    return id\n",
        "  if b == 160 then\n    return ''\n",
        "the audit trail records an empty correlation id for a job whose payload stores ''",
        ("tests/test_audit.py::test_a_job_s_own_id_as_its_correlation_id_is_stored_as_empty",),
    ),
    # -- the hand-off to the executors -------------------------------------------
    Mutation(
        "dispatch-wakes-every-executor", "leasequeue/runtime/dispatch.py",
        "        if not self._woken:\n            self._wake(1)\n",
        "        self._wake(len(self._sleepers))\n",
        "a job handed to an idle worker wakes every idle executor (each runs its task "
        "to find nothing), not one",
        (f"{RUNTIME}::test_a_job_handed_to_idle_executors_wakes_one_of_them",),
    ),
    Mutation(
        "dispatch-wakes-one-per-job", "leasequeue/runtime/dispatch.py",
        "        if not self._woken:\n            self._wake(1)\n",
        "        self._wake(len(jobs))\n",
        "a batch wakes one executor per job: the first few run through it, and the "
        "rest wake to an empty hand-off and sleep again",
        (f"{RUNTIME}::test_a_batch_wakes_executors_only_as_it_keeps_them_busy",),
    ),
    Mutation(
        "dispatch-take-passes-nothing-on", "leasequeue/runtime/dispatch.py",
        "                if self._jobs and not self._woken:\n",
        "                if False:\n",
        "an executor that takes a job with more behind it wakes no other: jobs that "
        "wait on I/O share one executor, one after the other",
        (f"{RUNTIME}::test_a_batch_wakes_executors_only_as_it_keeps_them_busy",),
    ),
    Mutation(
        "dispatch-woken-count-kept", "leasequeue/runtime/dispatch.py",
        "                self._waiting -= 1\n            self._woken -= 1\n",
        "                self._waiting -= 1\n",
        "an executor that ran after its wake still counts as on its way: the next "
        "hand-off wakes nobody, and its jobs wait",
        (f"{RUNTIME}::test_a_job_handed_to_idle_executors_wakes_one_of_them",),
    ),
    Mutation(
        "dispatch-woken-cancel-count-kept", "leasequeue/runtime/dispatch.py",
        "                    self._woken -= 1\n                    if self._jobs:\n",
        "                    if self._jobs:\n",
        "an executor woken and cancelled before it ran still counts as on its way: "
        "no later hand-off wakes anyone",
        (f"{RUNTIME}::test_an_executor_woken_then_cancelled_passes_its_job_on",),
    ),
    Mutation(
        "dispatch-woken-cancel-keeps-job", "leasequeue/runtime/dispatch.py",
        "                        self._wake(1)  # woken for a job, then cancelled: pass it on\n",
        "                        pass\n",
        "an executor woken for a job and cancelled before it runs keeps the wake: the "
        "job waits in the hand-off while another executor sleeps",
        (f"{RUNTIME}::test_an_executor_woken_then_cancelled_passes_its_job_on",),
    ),
    Mutation(
        "dispatch-cancelled-sleeper-stays", "leasequeue/runtime/dispatch.py",
        "                        self._sleepers.remove(sleeper)\n",
        "                        pass\n",
        "an executor cancelled while blocked leaves its future in the hand-off's list, "
        "which grows by one with each",
        (f"{RUNTIME}::test_an_executor_woken_then_cancelled_passes_its_job_on",),
    ),
    # -- batches prepared with collection held ----------------------------------
    Mutation(
        "gc-not-held", "leasequeue/gcpause.py",
        "            gc.disable()\n",
        "            pass\n",
        "a batch is prepared with automatic collection on: its jobs pile up and "
        "trigger collections that walk the whole process",
        ("tests/test_gcpause.py::test_no_collection_runs_while_a_batch_is_prepared",),
    ),
    Mutation(
        "gc-enabled-for-a-program-that-disabled-it", "leasequeue/gcpause.py",
        "            _was_enabled = gc.isenabled()\n",
        "            _was_enabled = True\n",
        "a batch turns automatic collection on in a program that had turned it off",
        ("tests/test_gcpause.py::test_collection_comes_back_as_the_program_had_it",),
    ),
    Mutation(
        "gc-first-holder-out-enables", "leasequeue/gcpause.py",
        "            if _holders == 0 and _was_enabled:\n",
        "            if _was_enabled:\n",
        "the first of two holds (nested, or in two threads) to end turns collection "
        "back on while the other still holds it",
        ("tests/test_gcpause.py::test_collection_comes_back_as_the_program_had_it",
         "tests/test_gcpause.py::test_the_last_thread_out_turns_collection_back_on"),
    ),
    # -- the worker command's event loop (leasequeue/loops.py) --------------------
    Mutation(
        "loop-auto-ignores-uvloop", "leasequeue/loops.py",
        "    if has_uvloop():\n        return {\"use_uvloop\": True}\n",
        "    if loop == \"uvloop\" and has_uvloop():\n        return {\"use_uvloop\": True}\n",
        "`leasequeue worker` (--loop auto) runs on asyncio's own loop with uvloop "
        "installed: the CPU per job uvloop saves is lost, silently",
        ("tests/test_loops.py::test_auto_is_asyncio_s_own_loop_without_uvloop",
         "tests/test_loops.py::test_the_worker_command_runs_on_the_loop_it_is_given"),
    ),
    Mutation(
        "loop-flag-ignored", "leasequeue/cli.py",
        "        options = backend_options(args.loop) if args.command == \"worker\" else {}\n",
        "        options: dict[str, bool] = {}\n",
        "`leasequeue worker --loop` is parsed and ignored: every worker runs on "
        "asyncio's own loop, and --loop uvloop without uvloop is no error",
        ("tests/test_loops.py::test_the_worker_command_runs_on_the_loop_it_is_given",
         "tests/test_loops.py::test_loop_uvloop_without_uvloop_is_one_line"),
    ),
    Mutation(
        "running-loop-always-asyncio", "leasequeue/loops.py",
        "    return \"uvloop\" if module.split(\".\")[0] == \"uvloop\" else \"asyncio\"\n",
        "    return \"asyncio\"\n",
        "the worker's start line says asyncio on uvloop's loop: an operator cannot "
        "tell which loop a worker runs on",
        ("tests/test_loops.py::test_running_loop_names_the_loop_it_runs_on",
         "tests/test_loops.py::test_the_worker_command_runs_on_the_loop_it_is_given"),
    ),
    Mutation(
        "sync-lane-shared-after-fork", "leasequeue/store/sync_lane.py",
        "        forget_in_child(self)\n",
        "",
        "a forked child keeps its parent's idle connections: both processes write and "
        "read on one socket, and each may read the other's replies",
        ("tests/test_sync_lane.py::test_a_forked_child_never_talks_on_its_parent_s_"
         "connection",),
    ),
    Mutation(
        "sync-lane-shared-by-threads", "leasequeue/store/sync_lane.py",
        "            conn = idle.pop() if idle else self._connection()\n",
        "            conn = idle[-1] if idle else self._connection()\n",
        "two threads of the sync producer take the same idle connection at once: their "
        "commands interleave on one socket and a thread reads the other's reply",
        ("tests/test_sync_lane.py::test_threads_share_the_lane_and_each_reads_its_own_"
         "replies",),
    ),
    Mutation(
        "sync-lane-no-reload-on-noscript", "leasequeue/store/sync_lane.py",
        "                    except NoScriptError:\n"
        "                        load_script(conn, script)\n",
        "                    except KeyError:\n"
        "                        load_script(conn, script)\n",
        "the sync producer does not load a script Redis lost (SCRIPT FLUSH, a restart "
        "without persistence): every enqueue fails with NOSCRIPT",
        ("tests/test_sync.py::test_scripts_reload_after_a_script_flush",),
    ),
    # -- the codec's fast paths ---------------------------------------------------
    Mutation(
        "empty-envelope-drops-request-id", "leasequeue/codec.py",
        "    if (payload is None and not correlation_id and not request_id and not rerun_of\n",
        "    if (payload is None and not correlation_id and not rerun_of\n",
        "a job enqueued with no payload but a request id is stored with the empty "
        "envelope: its request id is lost",
        ("tests/test_codec.py::test_a_job_with_no_payload_but_any_id_or_header_keeps_it",),
    ),
    Mutation(
        "empty-envelope-drops-headers", "leasequeue/codec.py",
        "            and not headers and len(EMPTY_ENVELOPE) <= limit):\n",
        "            and len(EMPTY_ENVELOPE) <= limit):\n",
        "a job with no payload loses the headers a hook added (its trace context)",
        ("tests/test_codec.py::test_a_job_with_no_payload_but_any_id_or_header_keeps_it",),
    ),
    Mutation(
        "empty-envelope-skips-the-limit", "leasequeue/codec.py",
        "            and not headers and len(EMPTY_ENVELOPE) <= limit):\n",
        "            and not headers):\n",
        "the envelope of a job with no payload is taken whatever the payload limit",
        ("tests/test_codec.py::test_a_payload_limit_below_the_empty_envelope_still_refuses_it",),
    ),
    Mutation(
        "batch-shape-ignores-queue", "leasequeue/producer.py",
        "r.name is not last.name or r.queue is not last.queue\n",
        "r.name is not last.name\n",
        "a batch request sent to another queue than the request before it shares that "
        "request's checked shape: it goes to the other's queue, and a bad queue name "
        "is written",
        (f"{SCRIPTS}::test_a_batch_checks_every_request_whose_options_differ_from_the_"
         "one_before",),
    ),
    Mutation(
        "batch-shape-ignores-delay", "leasequeue/producer.py",
        "or r.priority is not last.priority or r.delay is not last.delay\n",
        "or r.priority is not last.priority\n",
        "a delayed batch request after an immediate one shares its checked shape: it is "
        "queued at once, and a negative delay is written",
        (f"{SCRIPTS}::test_a_batch_checks_every_request_whose_options_differ_from_the_"
         "one_before",),
    ),
    Mutation(
        "batch-shape-ignores-budgets", "leasequeue/producer.py",
        "                        or r.max_attempts is not last.max_attempts\n",
        "",
        "a batch request with its own max_attempts after one without shares that one's "
        "checked shape: its budget is dropped, and a bad one is written",
        (f"{SCRIPTS}::test_a_batch_checks_every_request_whose_options_differ_from_the_"
         "one_before",),
    ),
    Mutation(
        "enqueue-small-hash-misses-ids", "lua/enqueue.lua",
        "    known[id] = true\n",
        "    known[id] = false\n",
        "a batch into a small jobs hash finds none of its ids there: a job that exists "
        "is written again, its record replaced and its id queued twice",
        (f"{SCRIPTS}::test_a_batch_finds_the_jobs_that_exist_whatever_the_size_of_the_"
         "jobs_hash",),
    ),
    Mutation(
        "batch-route-drops-limit-keys", "leasequeue/producer.py",
        "                known = routes[key] = self.route(r.name, r.queue)\n",
        "                known = routes[key] = (*self.route(r.name, r.queue)[:2], False)\n",
        "a batch's cached route forgets that its job has limit keys: no payload of the "
        "batch has its key rendered (a bad one is written, its park group lost)",
        ("tests/test_rate_limits.py::test_a_batch_routes_each_kind_once_and_still_renders_"
         "every_job_s_key",),
    ),
    Mutation(
        "batch-route-ignores-queue", "leasequeue/producer.py",
        "            key = (r.name, r.queue)\n",
        "            key = (r.name, None)\n",
        "a batch routes by job name alone: a job sent to another queue than its kind's "
        "first goes where that one went",
        ("tests/test_rate_limits.py::test_a_batch_routes_each_kind_once_and_still_renders_"
         "every_job_s_key",),
    ),
    Mutation(
        "plain-batch-checks-first-only", "leasequeue/producer.py",
        "        for r in batch:  # a pass of identity checks",
        "        for r in batch[:1]:  # a pass of identity checks",
        "plain_batch checks the first request alone: a later one's payload, id or options "
        "are dropped, every job written as the first one",
        (f"{SCRIPTS}::test_any_request_not_plain_sends_the_batch_to_prepare_many",),
    ),
    Mutation(
        "plain-batch-ignores-hooks", "leasequeue/producer.py",
        "        if infos is not None or not batch:\n",
        "        if not batch:\n",
        "a plain batch skips the enqueue hooks: before_enqueue never sees its jobs (no trace "
        "headers) and after_enqueue gets nothing",
        (f"{SCRIPTS}::test_any_request_not_plain_sends_the_batch_to_prepare_many",),
    ),
    Mutation(
        "plain-batch-ignores-shards", "leasequeue/producer.py",
        "        if keyed is not None or self.shards.count(queue) != 1:\n",
        "        if keyed is not None:\n",
        "a plain batch for a sharded queue is written under the logical queue's own keys, in "
        "no shard: no worker of the shards sees it",
        (f"{SCRIPTS}::test_any_request_not_plain_sends_the_batch_to_prepare_many",),
    ),
    Mutation(
        "plain-batch-ids-of-the-first-call", "leasequeue/producer.py",
        "            ids = job_ids_of(self._raw[span.start * ID_BYTES:span.stop * ID_BYTES])\n",
        "            ids = job_ids_of(self._raw[:(span.stop - span.start) * ID_BYTES])\n",
        "every call of a plain batch takes the first call's ids: the jobs of every call "
        "after the first are answered 'existed' and never queued",
        (f"{SCRIPTS}::test_a_plain_batch_makes_the_jobs_prepare_many_makes",),
    ),
    Mutation(
        "plain-batch-answers-first-span", "leasequeue/app.py",
        "self.producer.answer(answers, plain[k], queue, plain.span(k), replies, None)\n",
        "self.producer.answer(answers, plain[k], queue, plain.span(0), replies, None)\n",
        "a plain batch answers every call's jobs in the first call's places: the first 500 "
        "answers are the last call's jobs and the rest are missing",
        (f"{SCRIPTS}::test_a_plain_batch_is_written_in_order_and_checked_before_any_write",),
    ),
    Mutation(
        "plain-batch-keeps-answered-calls", "leasequeue/app.py",
        "            plain.forget(k)\n",
        "",
        "a plain batch keeps every call's jobs until the batch is answered: 20,000 jobs a "
        "call promoted to the collector's oldest generation, a full collection sooner",
        (f"{SCRIPTS}::test_a_plain_batch_is_written_in_order_and_checked_before_any_write",),
    ),
    Mutation(
        "batch-answers-in-one-span", "leasequeue/producer.py",
        "        if chunk and chunk[-1] - chunk[0] + 1 == len(chunk):",
        "        if chunk:",
        "a batch's answers for a shard's call are written over one span from its first "
        "index: a sharded batch answers its jobs in the wrong places, and drops some",
        ("tests/test_shards_durable.py::test_job_ids_route_to_one_shard_and_dedup_holds",),
    ),
    Mutation(
        "batch-group-ignores-shards", "leasequeue/producer.py",
        "            if self.shards.count(queue) == 1:  # one queue, not sharded: "
        "all of it, in order\n",
        "            if True:  # one queue, not sharded: all of it, in order\n",
        "a batch for one sharded queue is written under the logical queue's own keys, "
        "in no shard: no worker of the shards sees it",
        ("tests/test_shards_durable.py::test_job_ids_route_to_one_shard_and_dedup_holds",),
    ),
    Mutation(
        "enqueue-backfill-short", "lua/enqueue.lua",
        "        for j = 1, n - 1 do\n",
        "        for j = 1, n - 2 do\n",
        "a batch's first job that existed starts the per-job reply one job short: "
        "the job before it is answered with nothing",
        ("tests/test_scripts.py::test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_"
         "own_options",),
    ),
    Mutation(
        "enqueue-ready-counts-with-records", "lua/enqueue.lua",
        "        ready[queued - 1] = int(base_score + seq)\n        ready[queued] = id\n",
        "        ready[w - 1] = int(base_score + seq)\n        ready[w] = id\n",
        "the ready list takes its place from the records' count: a scheduled job in "
        "the batch leaves a hole, and the queued jobs after it are not added to the "
        "ready set",
        ("tests/test_scripts.py::test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_"
         "own_options",),
    ),
    Mutation(
        "enqueue-mixed-batch-no-reply", "lua/enqueue.lua",
        "if not reply then  -- every job created, in states of more than one run\n",
        "if false then  -- every job created, in states of more than one run\n",
        "a batch that created every job in states of more than one run answers nothing",
        ("tests/test_scripts.py::test_a_batch_answers_every_job_in_order_whatever_it_"
         "created",),
    ),
    Mutation(
        "closed-under-a-call-rises", "leasequeue/store/translate.py",
        "            and str(exc).startswith(\"'NoneType' object has no attribute\"))\n",
        "            and False)\n",
        "redis-py's AttributeError on a connection another task closed (a cluster "
        "client's failover, redis-py before 8.2) rises as a crash of the task that "
        "sent the call, not as RedisUnavailable",
        ("tests/test_errors.py::test_a_connection_closed_under_a_call_inside_redis_py_is_"
         "unavailable",),
    ),
    Mutation(
        "uvloop-closed-transport-rises", "leasequeue/store/translate.py",
        '    return text.startswith("unable to perform operation on <") and text.endswith(\n',
        '    return False and text.endswith(\n',
        "uvloop's error for a write on a closed transport rises as it is: a worker on "
        "uvloop loses its claimer to a master failover",
        ("tests/test_errors.py::test_a_write_on_a_transport_closed_under_a_call_on_uvloop_"
         "is_unavailable",),
    ),
    Mutation(
        "lane-write-closed-transport-rises", "leasequeue/store/direct.py",
        "        if not closed_transport(exc):\n            raise\n",
        "        raise\n",
        "the lane lets uvloop's closed-transport error through instead of a "
        "ConnectionError: no drop-and-retry of the dead connection",
        ("tests/test_errors.py::test_a_write_on_a_transport_closed_under_a_call_on_uvloop_"
         "is_unavailable",),
    ),
    # -- the place in line (lua/_lib.lua, LINE_FLOOR) ------------------------------
    Mutation(
        "cancel-leaves-line-uncounted", "lua/cancel.lua",
        "    redis.call('HINCRBY', stats_key, 'line_stale', 1)\n",
        "",
        "cancel.lua leaves a canceled job's entry in the line uncounted: stats count it "
        "ready until a claim pops it",
        ("tests/test_line.py::test_a_job_canceled_in_the_line_is_not_ready_and_does_not_"
         "empty_a_claim",),
    ),
    Mutation(
        "stats-counts-stale", "lua/stats.lua",
        "              math.max(0, redis.call('LLEN', line_key) - line_stale)\n",
        "              redis.call('LLEN', line_key)\n",
        "stats.lua counts the line's stale entries (canceled jobs) as ready",
        ("tests/test_line.py::test_a_job_canceled_in_the_line_is_not_ready_and_does_not_"
         "empty_a_claim",),
    ),
    Mutation(
        "claim-empty-behind-stale", "lua/claim.lua",
        "local STALE_POPS = 8\n",
        "local STALE_POPS = 1\n",
        "a claim that popped only stale entries answers empty while jobs are queued behind "
        "them (no pop in their place)",
        ("tests/test_line.py::test_a_job_canceled_in_the_line_is_not_ready_and_does_not_"
         "empty_a_claim",
         "tests/test_line.py::test_a_claim_behind_many_stale_entries_stops_and_says_claim_"
         "again"),
    ),
    Mutation(
        "claim-leases-an-id-twice", "lua/claim.lua",
        "      local drop = not raw or seen[id] or (",
        "      local drop = not raw or (",
        "claim.lua leases a job twice in one call when its id has two entries (a canceled "
        "job's stale one, and the id enqueued again): two tokens, two runs of one job",
        ("tests/test_line.py::test_an_id_enqueued_again_behind_its_stale_entry_is_leased_"
         "once",),
    ),
    Mutation(
        "claim-line-entry-ignores-ready-home", "lua/claim.lua",
        "          drop = counted > 0 and redis.call('ZSCORE', ready_key_, id) ~= false\n",
        "          drop = false\n",
        "claim.lua leases a job through a stale line entry while the job waits in the ready "
        "set: the count of stale entries stays one too high, and a later job in the line "
        "goes uncounted",
        ("tests/test_line.py::test_a_stale_line_entry_of_a_job_now_in_the_ready_set_is_not_"
         "its_run",),
    ),
    Mutation(
        "claim-line-entry-ignores-ready-pop", "lua/claim.lua",
        "        if from_ready[id] then\n",
        "        if false then\n",
        "claim.lua keeps a stale line entry of a job it popped from the ready set in the "
        "same call (and drops the home entry as the duplicate): the stale count stays one "
        "too high",
        ("tests/test_line.py::test_a_stale_line_entry_of_a_job_now_in_the_ready_set_is_not_"
         "its_run",),
    ),
    Mutation(
        "line-before-ready-set", "lua/claim.lua",
        "  while i < #popped and tonumber(popped[i + 1]) < LINE_FLOOR do\n",
        "  while false do\n",
        "a claim takes the line before the ready set's higher priorities and the jobs put "
        "back at their place",
        ("tests/test_line.py::test_claims_take_higher_priority_then_put_back_jobs_then_the_"
         "line_then_lower",),
    ),
    Mutation(
        "park-put-back-reversed", "lua/claim.lua",
        "          table.insert(front, 1, id)  -- LPUSH puts the last one given first\n",
        "          front[#front + 1] = id\n",
        "the jobs a parking claim puts back at the front of the line come back in reverse "
        "order",
        ("tests/test_rate_limits.py::test_a_claim_parks_at_most_256_and_says_claim_again",),
    ),
    Mutation(
        "retry-at-its-old-place", "lua/_lib.lua",
        "    redis.call('RPUSH', line_key, id)\n",
        "    redis.call('ZADD', ready_key, ready_score(meta), id)\n",
        "a retry of priority 0 goes to the ready set, which claims take before the line: it "
        "jumps ahead of every job queued before it",
        ("tests/test_line.py::test_a_retry_enters_the_line_behind_what_is_queued",),
    ),
    Mutation(
        "listing-skips-line", "leasequeue/store/listing.py",
        "    if isinstance(after, AfterLine):\n        got, at = await page_line(",
        "    if False:\n        got, at = await page_line(",
        "App.jobs('queued') lists the ready set only, not the line (every priority-0 job "
        "missing)",
        ("tests/test_line.py::test_queued_jobs_page_in_claim_order_across_the_ready_set_and_"
         "the_line",),
    ),
    Mutation(
        "line-cursor-not-found-again", "leasequeue/store/listing.py",
        "            found = await redis.lpos(key, after.member, maxlen=start)\n",
        "            found = None\n",
        "a cursor into the line whose entry claims moved is not looked for: the next page "
        "starts at the front again (jobs seen twice)",
        ("tests/test_line.py::test_queued_jobs_page_in_claim_order_across_the_ready_set_and_"
         "the_line",),
    ),
    Mutation(
        "v4-lease-ignores-park", "lua/claim.lua",
        "      if prio and (grp == '' or not park_of(parks, parked_key, grp, now_us)) then\n",
        "      if prio then\n",
        "claim.lua's lease of a record as enqueued (version 4) leases a job whose rate group "
        "is parked",
        ("tests/test_rate_limits.py::test_a_claim_parks_a_busy_keys_jobs_one_interval_apart",),
    ),
    Mutation(
        "v4-ready-time-zero", "lua/_lib.lua",
        "      prio = prio, seq = seq, enq_ms = enq_ms, ready_ms = enq_ms, due_ms = '0', "
        "claim_ms = '0',\n",
        "      prio = prio, seq = seq, enq_ms = enq_ms, ready_ms = '0', due_ms = '0', "
        "claim_ms = '0',\n",
        "parse_meta reads a record as enqueued (version 4) as never ready: the oldest ready "
        "job's age is lost",
        ("tests/test_scripts.py::test_stats_counts_and_oldest_age",
         "tests/test_lua_contracts.py::test_new_record_is_what_encode_meta_writes"),
    ),
    Mutation(
        "v4-python-ready-time-zero", "leasequeue/store/record.py",
        '        m.update(_V4_IMPLIED, ready_ms=m["enq_ms"])\n',
        '        m.update(_V4_IMPLIED, ready_ms=0)\n',
        "Python reads a record as enqueued (version 4) as never ready (get_job's ready_at "
        "None)",
        ("tests/test_lua_contracts.py::test_new_record_is_what_encode_meta_writes",),
    ),
    # -- the demo ------------------------------------------------------------------
    Mutation(
        "demo-crash-ignores-reaped", "leasequeue/demo.py",
        "        held += await _reaped_from(stage.app, victim)\n",
        "",
        "the demo's crash scene lists what the victim held from its leases once it is "
        "gone only: when the reaper took them back before the killed worker was gone, "
        "it finds nothing and the demo fails",
        ("tests/test_demo.py::test_the_crash_scene_lists_what_the_victim_held_when_its_"
         "task_ends_late",),
    ),
    # -- the executor's run scope (handler.RunScopes) ------------------------------
    Mutation(
        "run-scope-kept-after-a-swallowed-stop", "leasequeue/runtime/handler.py",
        "                scopes.leave()\n",
        "                pass\n",
        "a handler that swallowed its stop and returned leaves its cancelled scope "
        "entered: the executor's next await (its next run's) is cancelled",
        (f"{SCOPES}::test_a_handler_that_swallows_its_stop_leaves_what_follows_uncancelled",),
    ),
    Mutation(
        "run-scope-not-cleared", "leasequeue/runtime/handler.py",
        "            run.scope = None\n            if scope.cancel_called:\n",
        "            if scope.cancel_called:\n",
        "a run that returned keeps pointing at the executor's scope: a late stop of it "
        "(a cancel, a lost lease) cancels the next run on that executor",
        (f"{SCOPES}::test_a_stop_of_a_run_that_ended_does_not_reach_the_next",),
    ),
    Mutation(
        "run-scope-kept-after-a-stop", "leasequeue/runtime/handler.py",
        "                    if scopes.leave(exc):\n",
        "                    if True:\n",
        "a stopped run's cancelled scope is not left: the next run on that executor is "
        "cancelled as it starts",
        (f"{SCOPES}::test_a_stopped_run_leaves_the_next_run_on_its_executor_whole",),
    ),
    Mutation(
        "run-scope-blind-to-native-cancels", "leasequeue/runtime/handler.py",
        "            if task is not None and task.cancelling() == self._cancelling:\n",
        "            if True:\n",
        "the executor's scope is kept after a handler swallowed a native Task.cancel(): "
        "anyio then takes a later run's stop for a foreign cancellation and lets it end "
        "the executor",
        (f"{SCOPES}::test_a_native_cancel_a_handler_swallowed_does_not_break_later_stops",),
    ),
    Mutation(
        "run-scope-unchecked", "leasequeue/runtime/handler.py",
        "        if state is None or state.cancel_scope is not self._scope:\n",
        "        if False:\n",
        "a handler that leaves an anyio scope of its own open is not found out after it "
        "returns: it succeeds, and the next stop on that executor cannot leave the shared "
        "scope, whose cancellation then hits the executor's own work and ends the worker",
        (f"{SCOPES}::test_a_handler_that_leaves_its_own_scope_open_fails_and_later_stops_"
         "work",),
    ),
    Mutation(
        "lane-proto-feeds-past-the-stream", "leasequeue/store/direct.py",
        "        if stream._buffer or stream._waiter is not None:\n",
        "        if False:\n",
        "the lane's protocol feeds its hiredis reader while redis-py waits on the stream "
        "(SCRIPT LOAD after a NOSCRIPT): redis-py's read never wakes, or reads out of order",
        ("tests/test_direct.py::test_redis_py_s_reads_and_the_lane_s_share_a_connection_"
         "in_order",),
    ),
    Mutation(
        "lane-proto-lost-keeps-read", "leasequeue/store/direct.py",
        "        self._fail_waiter(RedisConnectionError(what))\n",
        "        pass\n",
        "a lane read whose connection the server closed waits on: without a socket "
        "timeout, for ever",
        ("tests/test_direct.py::test_a_connection_lost_mid_read_fails_the_read_at_once",),
    ),
    Mutation(
        "lane-proto-kept-across-reconnects", "leasequeue/store/direct.py",
        "    if proto is None or proto.stream is not stream:\n",
        "    if proto is None:\n",
        "a reconnected lane connection waits on the protocol of its old transport, which "
        "no byte reaches any more",
        ("tests/test_direct.py::test_a_reconnected_lane_connection_gets_a_protocol_of_its_own",),
    ),
    Mutation(
        "lane-proto-ignores-stream-bytes", "leasequeue/store/direct.py",
        "    return not (stream._buffer or stream._eof or stream._exception is not None)\n",
        "    return not (stream._eof or stream._exception is not None)\n",
        "a lane read waits on its protocol while the rest of its reply sits in the stream "
        "(behind a reply redis-py read): it waits for bytes that never come",
        ("tests/test_direct.py::test_a_lane_read_behind_bytes_the_stream_holds_reads_them_"
         "first",),
    ),
    Mutation(
        "lane-proto-ignores-stream-error", "leasequeue/store/direct.py",
        "    return not (stream._buffer or stream._eof or stream._exception is not None)\n",
        "    return not (stream._buffer or stream._eof)\n",
        "a lane read on a connection reset while idle waits on its protocol instead of "
        "raising the error the stream kept: without a socket timeout, for ever",
        ("tests/test_direct.py::test_a_reset_of_an_idle_lane_connection_fails_its_next_read",),
    ),
    Mutation(
        "lane-timer-lost-between-waits", "leasequeue/store/direct.py",
        "        self._fail_waiter(exc)\n        self.stream.set_exception(exc)\n",
        "        self._fail_waiter(exc)\n        if self.stream._waiter is not None:\n"
        "            self.stream.set_exception(exc)\n",
        "a read timer that fires while the read is between two waits (in an async push "
        "handler) is lost: the read's next wait has no timer armed",
        ("tests/test_direct.py::test_a_read_timer_firing_between_two_waits_fails_the_read",),
    ),
    Mutation(
        "lane-proto-parse-error-escapes", "leasequeue/store/direct.py",
        "            except Exception as exc:  # not RESP (hiredis's InvalidResponse): "
        "the read fails\n",
        "            except ZeroDivisionError as exc:\n",
        "bytes hiredis cannot parse raise out of data_received: asyncio logs a fatal error "
        "and closes the transport, and the read sees a dropped connection (and retries)",
        ("tests/test_direct.py::test_a_reply_hiredis_cannot_parse_fails_the_read_not_the_"
         "transport",),
    ),
    Mutation(
        "unix-url-gets-keepalive", "leasequeue/store/connection.py",
        "    if not url.startswith(\"unix://\"):  "
        "# (redis-py's Unix connections refuse the option)\n",
        "    if True:\n",
        "a unix:// URL gets socket_keepalive, which redis-py's Unix socket connections "
        "refuse: every call of an App or SyncApp on a Unix socket fails with a TypeError",
        ("tests/test_direct.py::test_a_unix_socket_connection_takes_the_direct_path",),
    ),
    Mutation(
        "unix-connection-not-direct", "leasequeue/store/direct.py",
        "    return (isinstance(conn, (Connection, UnixDomainSocketConnection))\n",
        "    return (isinstance(conn, Connection)\n",
        "a Unix socket connection takes redis-py's per-command path (asyncio.wait_for, a "
        "second timer) instead of the lane's direct one",
        ("tests/test_direct.py::test_a_unix_socket_connection_takes_the_direct_path",),
    ),
    Mutation(
        "lane-proto-skipped", "leasequeue/store/direct.py",
        "                elif proto is not None and _stream_empty(stream):\n",
        "                elif False and _stream_empty(stream):\n",
        "lane reads go back through redis-py's StreamReader (its feed, wait coroutine and "
        "buffer copy each round trip): about 9,000 client instructions a call more",
        ("tests/test_direct.py::test_a_lane_read_takes_its_reply_from_the_lane_protocol",),
    ),
    Mutation(
        "claim-not-shielded", "leasequeue/runtime/claimer.py",
        "        with new_scope(shield=True):\n            batch = await self._p.scripts.claim(",
        "        with new_scope():\n            batch = await self._p.scripts.claim(",
        "a stop that comes while a claim is on the wire cuts it: the jobs Redis leased "
        "to it reach no executor and stay leased to nobody until their lease runs out",
        (f"{RUNTIME}::test_a_stop_during_a_claim_still_hands_its_jobs_over",),
    ),
    Mutation(
        "durable-sync-no-reload", "leasequeue/store/sync_scripts.py",
        "            except NoScriptError:\n                load_script(conn, script)\n",
        "            except ZeroDivisionError:\n                load_script(conn, script)\n",
        "a durable SyncApp enqueue after a SCRIPT FLUSH (or a restart) fails with NOSCRIPT "
        "instead of loading its script again",
        ("tests/test_sync.py::test_durable_mode_reloads_its_script_after_a_script_flush",),
    ),
    Mutation(
        "one-job-head-keeps-old-settings", "leasequeue/store/scripts.py",
        "        if self._current[0] is not settings:  # other settings (a test's): other heads\n",
        "        if self._current[0] is None:\n",
        "a one-job enqueue keeps sending the stream cap, audit flag and wake cap of the "
        "settings its head was packed with after the settings changed",
        (f"{ONE_JOB}::test_other_settings_get_other_heads",
         f"{ONE_JOB}::test_changed_settings_reach_a_packed_call"),
    ),
    Mutation(
        "one-job-head-shared-across-queues", "leasequeue/store/scripts.py",
        "            kept = heads.get((qk.prefix, qk.queue, name, line))\n",
        "            kept = heads.get((qk.prefix, \"default\", name, line))\n",
        "a one-job enqueue reuses the head packed for another queue of the same job name: "
        "the job lands in that queue's keys",
        (f"{ONE_JOB}::test_the_bytes_are_those_of_the_whole_call_packed",),
    ),
    Mutation(
        "one-job-packed-unsent-to-redis-py", "leasequeue/store/sync_lane.py",
        "        conn.send_packed_command([packed])  # a list: it iterates what it is given\n",
        "        conn.send_packed_command(packed)\n",
        "on a connection redis-py parses itself (Sentinel's), a one-job enqueue of the sync "
        "producer hands redis-py the bytes, which it iterates as ints: every such enqueue fails",
        (f"{ONE_JOB}::test_a_packed_call_goes_through_redis_py_on_a_connection_it_parses",),
    ),
    Mutation(
        "priority-accepts-bools", "leasequeue/producer.py",
        "        if not (isinstance(r.priority, int) and not isinstance(r.priority, bool)\n",
        "        if not (isinstance(r.priority, int)\n",
        "an enqueue with priority=True passes the checks: sent alone on a real Redis it is "
        "stored as priority 1, in a batch redis-py refuses it with its DataError",
        ("tests/test_errors.py::test_bad_numbers_are_config_errors",
         f"{ONE_JOB}::test_a_bool_priority_is_refused_before_anything_is_written"),
    ),
    Mutation(
        "priority-int-subclass-kept", "leasequeue/producer.py",
        "        priority = r.priority if r.priority.__class__ is int else int(r.priority)\n",
        "        priority = r.priority\n",
        "an IntEnum priority is kept as it is: alone it is formatted as its number, in a batch "
        "hiredis refuses it and redis-py sends its repr, which the script cannot read",
        (f"{ONE_JOB}::test_an_int_enum_is_sent_as_its_number_alone_and_in_a_batch",),
    ),
    # -- enqueue_one.lua: one job queued now at priority 0, and who sends it ------
    Mutation(
        "enqueue-line-allowed-over-maxmemory", "leasequeue/store/loader.py",
        '"enqueue_one": "#!lua", ',
        "",
        "enqueue_one.lua is loaded with the flags of a script that settles held work "
        "(allow-oom): over maxmemory a full Redis takes new jobs instead of refusing them",
        ("tests/test_reliability_oom.py::test_queued_jobs_drain_when_redis_is_full",
         "tests/test_direct.py::test_an_error_reply_keeps_the_connection_in_the_lane"),
    ),
    Mutation(
        "enqueue-line-budgets-swapped", "lua/enqueue_one.lua",
        "ARGV[3] .. '|' .. ARGV[4] .. '|' ..",
        "ARGV[4] .. '|' .. ARGV[3] .. '|' ..",
        "enqueue_one.lua writes the job's infrastructure budget where its attempts budget "
        "goes, and the other way round",
        (f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job",),
    ),
    Mutation(
        "enqueue-line-drops-grp", "lua/enqueue_one.lua",
        "ARGV[2] .. '|' .. ARGV[5] .. PAYLOAD_MARK .. payload",
        "ARGV[2] .. '|' .. PAYLOAD_MARK .. payload",
        "enqueue_one.lua leaves the job's park group (its rate key) out of its record: a "
        "claim over the rate would not park it by that key",
        (f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job",),
    ),
    Mutation(
        "enqueue-line-seq-rounded", "lua/enqueue_one.lua",
        "local record = '4|0|' .. seq .. '|'",
        "local record = '4|0|' .. string.format('%.6g', seq) .. '|'",
        "enqueue_one.lua prints the job's seq with six significant digits: past a million "
        "the record's place in the queue's order is wrong (and unreadable as an int)",
        (f"{SCRIPTS}::test_a_batch_numbers_its_records_in_sequence_across_tens",),
    ),
    Mutation(
        "enqueue-line-overwrites", "lua/enqueue_one.lua",
        "if redis.call('HSETNX', jobs_key, id, record) == 0 then\n",
        "if redis.call('HSET', jobs_key, id, record) == 0 then\n",
        "enqueue_one.lua writes its record over a job that exists under the same id (and "
        "still answers that it existed)",
        (f"{SCRIPTS}::test_enqueue_dedup_returns_existing",
         f"{SCRIPTS}::test_an_id_over_a_malformed_record_is_answered_malformed_and_writes_"
         "nothing"),
    ),
    Mutation(
        "enqueue-line-uncounted", "lua/enqueue_one.lua",
        "redis.call('HINCRBY', stats_key, 'enqueued', '1')\n",
        "",
        "enqueue_one.lua does not count the job in the queue's stats",
        (f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job",),
    ),
    Mutation(
        "enqueue-line-wakes-past-cap", "lua/enqueue_one.lua",
        "if redis.call('LLEN', KEYS[4]) < tonumber(ARGV[1]) then\n",
        "if true then\n",
        "enqueue_one.lua pushes a wake token whatever the wake list holds: with no worker "
        "idle it grows by a token a job, without bound",
        (f"{ONE_JOB}::test_a_one_job_enqueue_keeps_the_wake_list_at_its_cap",),
    ),
    Mutation(
        "one-job-line-takes-priorities", "leasequeue/store/scripts.py",
        "line and delay_ms <= 0 and priority == 0 and ",
        "line and delay_ms <= 0 and ",
        "a one-job enqueue of another priority goes to enqueue_one.lua: it waits in the line "
        "at priority 0",
        (f"{ONE_JOB}::test_a_job_goes_to_enqueue_one_only_when_queued_now_in_line_inline_and_"
         "unaudited", f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job"),
    ),
    Mutation(
        "one-job-line-takes-delays", "leasequeue/store/scripts.py",
        "line and delay_ms <= 0 and priority == 0 and ",
        "line and priority == 0 and ",
        "a delayed one-job enqueue goes to enqueue_one.lua: it is queued at once",
        (f"{ONE_JOB}::test_a_job_goes_to_enqueue_one_only_when_queued_now_in_line_inline_and_"
         "unaudited", f"{SCRIPTS}::test_one_job_and_a_batch_write_the_same_job"),
    ),
    Mutation(
        "one-job-line-takes-large-payloads", "leasequeue/store/scripts.py",
        " and len(payload) <= INLINE_MAX\n",
        "\n",
        "a one-job enqueue whose payload is over INLINE_MAX goes to enqueue_one.lua, which "
        "refuses it: the enqueue fails",
        (f"{ONE_JOB}::test_a_lone_payload_at_the_inline_bound_stays_in_its_record_one_over_"
         "does_not",),
    ),
    Mutation(
        "one-job-line-unaudited", "leasequeue/store/scripts.py",
        "                    and not settings.audit_all)\n",
        "                    )\n",
        "with audit_all on, a one-job enqueue goes to enqueue_one.lua, which writes no "
        "'enqueued' event",
        (f"{ONE_JOB}::test_changed_settings_reach_a_packed_call",),
    ),
    Mutation(
        "one-job-existing-not-asked", "leasequeue/store/scripts.py",
        "if reply.__class__ is not int or name != \"enqueue_one\":",
        "if True:",
        "App's one-job enqueue of an id that exists takes enqueue_one.lua's answer for a "
        "reply of the general kind, and fails instead of answering the job's state",
        (f"{SCRIPTS}::test_enqueue_dedup_returns_existing",),
    ),
    Mutation(
        "sync-one-job-existing-not-asked", "leasequeue/store/sync_scripts.py",
        "if reply.__class__ is not int or name != \"enqueue_one\":",
        "if True:",
        "SyncApp's one-job enqueue of an id that exists fails instead of answering the "
        "job's state",
        (f"{ONE_JOB}::test_the_sync_producer_stores_a_packed_job_as_asked",),
    ),

    # -- claim_line.lua: the claim of the common case, and who sends it ----------
    Mutation(
        "claim-line-ignores-paused", "lua/claim_line.lua",
        "if last_and_paused[2] or (last and",
        "if (last and",
        "claim_line.lua leases jobs from a paused queue",
        (f"{NOTHING}[paused]",),
    ),
    Mutation(
        "claim-line-retry-leases-anew", "lua/claim_line.lua",
        " or (last and string.sub(last, 1, #claim_id + 1) == claim_id .. '\\n')",
        "",
        "a retried claim id (its reply lost) leases new jobs in claim_line.lua instead of "
        "getting the first call's back from claim.lua: the first call's jobs are leased to "
        "nobody until their leases run out",
        (f"{NOTHING}[retried claim id]",),
    ),
    Mutation(
        "claim-line-skips-due-jobs", "lua/claim_line.lua",
        "if (#first > 0 and tonumber(first[2]) <= now) or",
        "if",
        "claim_line.lua leases the line while a scheduled job is due (claim.lua would "
        "promote it first)",
        (f"{NOTHING}[scheduled job due]",),
    ),
    Mutation(
        "claim-line-jumps-the-ready-set", "lua/claim_line.lua",
        " or redis.call('ZCARD', KEYS[1]) > 0 then",
        " then",
        "claim_line.lua leases the line ahead of a job of higher priority in the ready set",
        (f"{NOTHING}[ready set]",),
    ),
    Mutation(
        "claim-line-leases-an-id-twice", "lua/claim_line.lua",
        " and not seen[ids[i]] then",
        " then",
        "claim_line.lua leases a job twice in one call when its id has two entries in the "
        "front of the line (a canceled job's stale one, and the id enqueued again)",
        ("tests/test_line.py::test_an_id_enqueued_again_behind_its_stale_entry_is_leased_"
         "once",),
    ),
    Mutation(
        "claim-line-takes-park-groups", "lua/claim_line.lua",
        "  if grp ~= '' then",
        "  if grp == nil then",
        "claim_line.lua leases a job of a park group without claim.lua's park check, and "
        "writes it as a version 2 record (its group lost)",
        (f"{NOTHING}[park group]",),
    ),
    Mutation(
        "claim-line-leases-without-popping", "lua/claim_line.lua",
        "redis.call('LPOP', KEYS[9], int(n))\n",
        "",
        "claim_line.lua leases the jobs at the front of the line and leaves their ids there: "
        "the next claim finds them leased (stale) and every one is counted garbage",
        (SAME,),
    ),
    Mutation(
        "claim-line-token-behind-reply", "lua/claim_line.lua",
        "  local token = int(top - n + i)\n",
        "  local token = int(top - n + i - 1)\n",
        "claim_line.lua writes each record a fencing token one below the one it answers "
        "(the run's acks are refused)",
        (SAME,),
    ),
    Mutation(
        "claim-line-starts-one-more", "lua/claim_line.lua",
        "  if i <= start_now then",
        "  if i <= start_now + 1 then",
        "claim_line.lua marks one run more started than asked (its attempt counted although "
        "no executor starts it)",
        (SAME,),
    ),
    Mutation(
        "claim-line-lease-ends-now", "lua/claim_line.lua",
        "local lease_until = int(now + tonumber(ARGV[2]))",
        "local lease_until = int(now)",
        "claim_line.lua leases until now: the reaper takes every run back at once",
        (SAME,),
    ),
    Mutation(
        "claim-line-drops-outside-payloads", "lua/claim_line.lua",
        "    reply[place] = got[k] or ''",
        "    reply[place] = ''",
        "claim_line.lua answers an empty payload for a job whose payload is in the payloads "
        "hash (over INLINE_MAX)",
        (SAME,),
    ),
    Mutation(
        "claim-line-forgets-the-claim", "lua/claim_line.lua",
        "redis.call('SET', KEYS[10], claim_id",
        "redis.call('GET', KEYS[10], claim_id",
        "claim_line.lua writes no claim key: a claim whose reply is lost cannot be retried "
        "for its jobs",
        (SAME,),
    ),
    Mutation(
        "claim-line-counter-not-continued", "lua/claim_line.lua",
        "  if old > 0 then",
        "  if false then",
        "claim_line.lua starts a lost token counter from 0 instead of the old one in stats "
        "(fencing tokens repeat)",
        (SAME,),
    ),
    Mutation(
        "line-claim-unaudited", "leasequeue/store/scripts.py",
        "if count > CLAIM_LINE_MAX or self.settings.audit_all:",
        "if count > CLAIM_LINE_MAX:",
        "with audit_all on, a claim goes to claim_line.lua, which writes no 'claimed' event",
        (f"{LINE}::test_which_claims_go_to_the_line_first",),
    ),
    Mutation(
        "line-claim-handover-ignored", "leasequeue/store/scripts.py",
        "            if reply.__class__ is not int:\n                return claim_batch",
        "            if True:\n                return claim_batch",
        "a claim claim_line.lua hands to claim.lua is read as a reply: the claim fails",
        (f"{NOTHING}[paused]",),
    ),
    Mutation(
        "wait-line-claim-handover-ignored", "leasequeue/store/scripts.py",
        "        if reply.__class__ is int:  # claim_line.lua",
        "        if False:  # claim_line.lua",
        "the claim behind an idle wait, handed by claim_line.lua to claim.lua, is read as a "
        "reply: the wait fails",
        (f"{LINE}::test_a_wait_whose_line_claim_hands_over_is_claimed_by_claim_lua",),
    ),
    Mutation(
        "line-claim-never-again", "leasequeue/store/scripts.py",
        "        if _clock() < until:",
        "        if True:",
        "once claim_line.lua handed a queue's claim to claim.lua, every later claim of the "
        "queue goes to claim.lua",
        (f"{LINE}::test_which_claims_go_to_the_line_first",),
    ),
    Mutation(
        "default-shape-survives-register", "leasequeue/producer.py",
        "        version, shapes = self._shapes\n        if version != self.registry.version:",
        "        version, shapes = self._shapes\n        if False:",
        "a call's cached default shape outlives the registry gaining a job: a producer-only "
        "App's names keep going to its default queue, a name's new limit keys go unchecked",
        (f"{ONE}::test_default_shapes_are_dropped_when_the_registry_gains_a_job",),
    ),
    Mutation(
        "default-shape-survives-queue-rates", "leasequeue/producer.py",
        "        self._queue_rates = rates\n        self._drop_cached()\n",
        "        self._queue_rates = rates\n",
        "a call's cached default shape and common-call entry outlive queue_rates being set: a "
        "queue's rate key is never rendered, its jobs never parked by tenant",
        (f"{ONE}::test_default_shapes_are_dropped_when_the_registry_gains_a_job",),
    ),
    Mutation(
        "plain-survives-register", "leasequeue/producer.py",
        "        version, plains = self._plains\n        if version != self.registry.version:",
        "        version, plains = self._plains\n        if False:",
        "a name's cached common call outlives the registry gaining a job: a producer-only "
        "App's names keep going to its default queue, a name's new limit keys go unchecked",
        (f"{ONE}::test_default_shapes_are_dropped_when_the_registry_gains_a_job",),
    ),
    Mutation(
        "plain-survives-the-drop", "leasequeue/producer.py",
        "        self._shapes = (self.registry.version, {})\n"
        "        self._plains = (self.registry.version, {})\n",
        "        self._shapes = (self.registry.version, {})\n",
        "a name's cached common call outlives queue_rates or the shards being set: the "
        "queue's rate key is never rendered from its payloads, a queue that became sharded "
        "keeps taking every job into its unsharded keys",
        (f"{ONE}::test_default_shapes_are_dropped_when_the_registry_gains_a_job",
         f"{ONE}::test_the_common_call_goes_to_its_job_s_shard"),
    ),
    Mutation(
        "cached-survive-shards", "leasequeue/producer.py",
        "        self._shards = shards\n        self._drop_cached()\n",
        "        self._shards = shards\n",
        "a call's cached default shape and common-call entry outlive the shards being set: "
        "a queue that became sharded keeps taking every job into its unsharded keys",
        (f"{ONE}::test_the_common_call_goes_to_its_job_s_shard",),
    ),
    Mutation(
        "plain-ignores-limit-keys", "leasequeue/producer.py",
        "            if keyed is None and self._shards.count(queue) == 1:",
        "            if self._shards.count(queue) == 1:",
        "a name with limit keys takes the common call's cached entry: its keys are never "
        "rendered from the payload (no park group, no error for a payload without them)",
        (f"{ONE}::test_one_makes_the_job_and_the_error_prepare_makes",),
    ),
    Mutation(
        "plain-ignores-shards", "leasequeue/producer.py",
        "            if keyed is None and self._shards.count(queue) == 1:",
        "            if keyed is None:",
        "a sharded queue's common call takes one cached entry: every job of the name goes "
        "to the keys of its first job's shard",
        (f"{ONE}::test_the_common_call_goes_to_its_job_s_shard",),
    ),
    Mutation(
        "plain-ignores-given-id", "leasequeue/producer.py",
        "            if (job_id is None and queue is None and correlation_id is None",
        "            if (queue is None and correlation_id is None",
        "a call that gives its job id takes the common call's entry: the job gets a fresh "
        "id, and enqueueing it twice makes two jobs",
        (f"{ONE}::test_one_makes_the_job_and_the_error_prepare_makes",),
    ),
    Mutation(
        "plain-ignores-hooks", "leasequeue/producer.py",
        "                    and request_id is None and infos is None):",
        "                    and request_id is None):",
        "an enqueue with hooks takes the common call's entry: before_enqueue never sees "
        "the job, and a trace context is never added to it",
        ("tests/test_hooks.py::test_enqueue_hooks_see_the_common_call",),
    ),
    Mutation(
        "one-defaults-by-equality", "leasequeue/producer.py",
        "        if (delay is NO_DELAY and priority is NO_PRIORITY and max_attempts is None",
        "        if (delay == NO_DELAY and priority == NO_PRIORITY and max_attempts is None",
        "a call whose delay or priority only equals the default (False as priority) takes "
        "the cached shape: shape()'s checks never see it, a bool priority is written",
        (f"{ONE}::test_one_makes_the_job_and_the_error_prepare_makes",),
    ),
    Mutation(
        "keys-for-skips-the-route", "leasequeue/store/shards.py",
        "        if queue not in self._shards:\n            known = self._keys.get(queue)",
        "        if True:\n            known = self._keys.get(queue)",
        "Shards.keys_for takes a sharded queue's keys known under its own name: every job "
        "of the sharded queue lands in one unsharded queue no worker reads",
        (f"{ONE}::test_keys_for_is_the_keys_of_the_job_s_route",),
    ),
    Mutation(
        "given-job-id-unchecked", "leasequeue/producer.py",
        "        elif not isinstance(job_id, str) or not job_id or len(job_id) > 512:",
        "        elif False:",
        "a caller's job_id is written unchecked: an empty or 513-character id reaches Redis",
        (f"{ONE}::test_one_makes_the_job_and_the_error_prepare_makes",),
    ),
    Mutation(
        "reply-spin-past-its-budget", "leasequeue/store/spin.py",
        "                if perf_counter_ns() < deadline:\n                    _SCHED_YIELD()",
        "                if True:\n                    _SCHED_YIELD()",
        "the one-job enqueue reads its socket until the reply comes, however long Redis "
        "takes: a stalled Redis holds the whole event loop for as long as the stall",
        (f"{SPIN}::test_a_reply_later_than_the_budget_is_left_to_the_loop_and_the_next_"
         "call_waits",),
    ),
    Mutation(
        "reply-spin-never-backs-off", "leasequeue/store/spin.py",
        "                self.skip = (1 << self.misses) - 1\n",
        "",
        "a spin that ran out does not make the next calls wait on the loop: a client of a "
        "distant Redis spins its whole budget away on every call",
        (f"{SPIN}::test_misses_in_a_row_double_the_calls_that_do_not_spin_up_to_1023",
         f"{SPIN}::test_a_reply_later_than_the_budget_is_left_to_the_loop_and_the_next_"
         "call_waits"),
    ),
    Mutation(
        "reply-spin-hit-keeps-misses", "leasequeue/store/spin.py",
        "            if reply is not NOT_ENOUGH_DATA:\n                self.misses = 0\n",
        "            if reply is not NOT_ENOUGH_DATA:\n",
        "a reply that came within the budget does not end a run of misses: after a slow "
        "moment, every later miss skips up to 1,023 calls that would have spun",
        (f"{SPIN}::test_misses_in_a_row_double_the_calls_that_do_not_spin_up_to_1023",),
    ),
    Mutation(
        "reply-spin-while-the-loop-has-work", "leasequeue/store/spin.py",
        "        if read_now is None or held:\n",
        "        if read_now is None:\n",
        "the one-job enqueue spins while asyncio's loop has another callback ready: the "
        "other tasks wait out the spin instead of running while Redis answers",
        (f"{SPIN}::test_no_spin_while_another_callback_is_ready_on_asyncio_s_loop",
         f"{SPIN}::test_no_spin_without_a_read_of_its_own_or_with_a_callback_ready"),
    ),
    Mutation(
        "spin-streak-never-yields", "leasequeue/store/direct.py",
        "        if spin and self._turn.overdue():\n",
        "        if False:\n",
        "a task that enqueues in a loop never gives the event loop a turn while its spins hit: "
        "its other tasks, timers and sockets wait for the whole loop",
        (f"{SPIN}::test_a_task_that_enqueues_in_a_loop_lets_the_loop_turn_at_each_streak_s_end",),
    ),
    Mutation(
        "spin-streak-never-overdue", "leasequeue/store/spin.py",
        "        return self.handle is not None and perf_counter_ns() - self.since "
        "> MAX_STREAK_NS\n",
        "        return False\n",
        "a streak of spun calls has no bound: the loop's other work waits as long as the spins hit",
        (f"{SPIN}::test_a_streak_past_its_bound_is_overdue_until_the_loop_turns",
         f"{SPIN}::test_a_task_that_enqueues_in_a_loop_lets_the_loop_turn_at_each_streak_s_end"),
    ),
    Mutation(
        "spin-streak-ignores-other-tasks", "leasequeue/store/spin.py",
        "        return task is not self.task\n",
        "        return False\n",
        "a task run within another's streak spins too: on uvloop a burst of concurrent "
        "enqueues goes as lone calls, each answered before the next task runs",
        (f"{SPIN}::test_a_streak_is_one_task_s_until_the_loop_turns",
         f"{SPIN}::test_a_burst_of_concurrent_enqueues_batches_while_spins_hit"),
    ),
    Mutation(
        "spin-streak-own-end-is-work", "leasequeue/store/spin.py",
        "            if len(ready) > 1 or ready[0] is not self.handle:\n",
        "            if True:\n",
        "on asyncio's loop the streak's own end, queued, counts as work waiting: every "
        "second call of a task parks instead of spinning",
        (f"{SPIN}::test_a_callback_ready_on_asyncio_s_loop_is_work_waiting",),
    ),
    Mutation(
        "spin-streak-never-ends", "leasequeue/store/spin.py",
        "    def _turned(self) -> None:\n        self.handle = None\n",
        "    def _turned(self) -> None:\n        pass\n",
        "the loop's turn does not end a streak: after its first one every call of another "
        "task parks, and a task's streak stays overdue",
        (f"{SPIN}::test_a_streak_is_one_task_s_until_the_loop_turns",
         f"{SPIN}::test_a_streak_past_its_bound_is_overdue_until_the_loop_turns"),
    ),
    Mutation(
        "reply-spin-reads-tls", "leasequeue/store/direct.py",
        "        if sock is not None and transport.get_extra_info(\"sslcontext\") is None \\\n"
        "                and transport.get_extra_info(\"ssl_object\") is None:\n",
        "        if sock is not None:\n",
        "the spin may read a TLS connection's socket: it would feed encrypted bytes to the "
        "reply parser",
        ("tests/test_security_tls.py::test_verified_tls_connection_enqueues_and_runs",),
    ),
    Mutation(
        "sync-reply-spin-reads-tls", "leasequeue/store/sync_lane.py",
        "    if _DONTWAIT and not isinstance(sock, ssl.SSLSocket) and sock.gettimeout() is None:\n",
        "    if _DONTWAIT and sock.gettimeout() is None:\n",
        "the sync producer's spin reads a TLS socket with a flag its TLS layer refuses: "
        "every enqueue over TLS on a connection without a socket timeout fails",
        (f"{SPIN}::test_the_sync_lane_spins_only_on_a_blocking_plain_socket",),
    ),
    Mutation(
        "sync-reply-spin-reply-dropped", "leasequeue/store/sync_lane.py",
        "        if reply is NOT_ENOUGH_DATA:\n            reply = reader.gets()\n",
        "        reply = reader.gets()\n",
        "the sync producer reads its reader again after a spin that got the reply: the reply "
        "is dropped and the call waits for another until its socket timeout",
        (f"{SPIN}::test_a_sync_reply_within_the_budget_is_read_by_the_spin",),
    ),
    Mutation(
        "reply-spin-eof-as-a-miss", "leasequeue/store/spin.py",
        "            if not data:\n                raise RedisConnectionError(\"Connection "
        "closed by server.\")\n",
        "            if not data:\n                return NOT_ENOUGH_DATA\n",
        "an EOF read by the spin is taken for a reply not yet come: the read waits on "
        "the loop instead of failing as the lost connection it is",
        (f"{SPIN}::test_an_eof_during_a_spin_fails_the_read_as_a_lost_connection",),
    ),
    Mutation(
        "sync-reply-spin-on-python-timeout", "leasequeue/store/sync_lane.py",
        " and sock.gettimeout() is None:\n",
        ":\n",
        "the sync producer spins on a socket with Python's own timeout, where a recv polls "
        "first for as long as the timeout: the spin's budget no longer bounds it",
        (f"{SPIN}::test_the_sync_lane_spins_only_on_a_blocking_plain_socket",),
    ),
    Mutation(
        "reply-spin-keeps-its-cpu", "leasequeue/store/spin.py",
        "                    _SCHED_YIELD()  # (the module's docstring)\n",
        "",
        "the spin keeps its CPU between reads: on a host busy with other work it holds "
        "Redis and the other processes off the CPU it waits on (App's one enqueue per "
        "call fell to 0.70-0.87x of no spin beside a half-busy process)",
        (f"{SPIN}::test_a_spin_gives_its_cpu_to_a_waiting_process_between_reads",),
    ),
    Mutation(
        "claim-ahead-capped-at-concurrency", "leasequeue/runtime/slots.py",
        "self.ahead = min(max(self.size, AHEAD_MAX), int(self._rate * AHEAD_HORIZON))",
        "self.ahead = min(self.size, int(self._rate * AHEAD_HORIZON))",
        "a worker holds ahead no more than its concurrency: at concurrency 1 a claim and "
        "an ack round trip for every job or two (a drain at 1 ran at a fifth of the rate)",
        (f"{AHEAD}::test_a_fast_worker_holds_up_to_a_batch_ahead_at_any_concurrency",
         f"{AHEAD}::test_a_worker_of_concurrency_one_claims_short_jobs_in_batches"),
    ),
    Mutation(
        "held-runs-never-given-back", "leasequeue/runtime/held.py",
        "        if excess <= 0 or not len(dispatch):\n",
        "        if True:\n",
        "runs claimed ahead wait out a long run in the worker that holds them, however "
        "long, while other workers could run them",
        (f"{AHEAD}::test_runs_held_behind_a_long_run_go_back_for_another_worker",
         f"{AHEAD}::test_the_excess_goes_back_once_runs_waited_with_none_taken_newest_first"),
    ),
    Mutation(
        "held-runs-taken-back-at-once", "leasequeue/runtime/held.py",
        "        if now - max(self._still_since, dispatch.filled_at) < HOLD_MAX:\n",
        "        if False:\n",
        "runs claimed ahead are given back as soon as the rate dips, before any waited "
        "HOLD_MAX with none taken: a worker churns its claims (claimed, released, claimed "
        "again) and gives back runs its executors are about to take",
        (f"{AHEAD}::test_the_excess_goes_back_once_runs_waited_with_none_taken_newest_first",),
    ),
    Mutation(
        "given-back-counted-as-finished", "leasequeue/runtime/slots.py",
        "        if finished:\n            self.completed += n\n",
        "        self.completed += n\n",
        "runs given back count in the finishing rate: the worker holds as many ahead again, "
        "the same jobs first in line, and gives them back again",
        (f"{AHEAD}::test_runs_given_back_do_not_count_as_finished",),
    ),
    Mutation(
        "idle-claim-takes-ahead", "leasequeue/runtime/claimer.py",
        "        count = min(self._slots.idle, MAX_BATCH)\n",
        "        count = min(self._slots.free, MAX_BATCH)\n",
        "the claim behind an idle wait asks for what the worker held ahead while busy: a "
        "worker of concurrency 1 takes up to 101 jobs of the next burst, long ones too, "
        "and gives them back only after HOLD_MAX",
        (f"{AHEAD}::test_an_idle_worker_s_wait_claims_for_its_executors_not_ahead",),
    ),
    Mutation(
        "unstarted-runs-counted-as-finished", "leasequeue/runtime/executor.py",
        "                self._p.slots.give(finished=run.started_at > 0.0)\n",
        "                self._p.slots.give()\n",
        "runs skipped, pushed back or released before they start count in the finishing "
        "rate: a key at its limit has the worker claim ahead as fast as it sends runs back",
        (f"{AHEAD}::test_only_runs_that_ran_count_in_the_finishing_rate",),
    ),
    Mutation(
        "held-runs-dropped-when-release-fails", "leasequeue/runtime/held.py",
        "                keep += held\n",
        "",
        "runs taken back whose release call failed (Redis down) are dropped: out of the "
        "hand-off, never settled, their slots never freed (a stop then waits out its "
        "shutdown timeout)",
        (f"{AHEAD}::test_runs_given_back_are_settled_or_kept_in_the_hand_off",),
    ),
    Mutation(
        "queue-cache-unbounded-queues-checked", "leasequeue/app.py",
        "            if len(self._verified) >= CACHED_QUEUES:  # ever new queues: start again\n",
        "            if False:\n",
        "App's set of queues whose shard count it checked grows with every new queue it is "
        "given: no bound",
        (APP_QUEUES,),
    ),
    Mutation(
        "queue-cache-unbounded-sync-queues-checked", "leasequeue/sync.py",
        "            if len(self._verified) >= CACHED_QUEUES:  # ever new queues: start again\n",
        "            if False:\n",
        "SyncApp's set of queues whose shard count it checked grows with every new queue it "
        "is given: no bound",
        (SYNC_QUEUES,),
    ),
    Mutation(
        "queue-cache-unbounded-keys-built", "leasequeue/store/shards.py",
        "            if len(self._keys) >= CACHED_QUEUES:  # ever new queues: start again\n",
        "            if False:\n",
        "the keys built per queue grow with every new queue a client is given: no bound",
        (APP_QUEUES, SYNC_QUEUES),
    ),
    Mutation(
        "queue-cache-unbounded-keys-encoded", "leasequeue/store/scripts.py",
        "            if len(self._key_cache) >= CACHED_QUEUES:  # ever new queues: start again\n",
        "            if False:\n",
        "App's keys encoded per (script, queue) grow with every new queue: no bound",
        (APP_QUEUES,),
    ),
    Mutation(
        "queue-cache-unbounded-sync-keys-encoded", "leasequeue/store/sync_scripts.py",
        "            if len(self._key_cache) >= CACHED_QUEUES:  # ever new queues: start again\n",
        "            if False:\n",
        "SyncApp's keys encoded per (script, queue) grow with every new queue: no bound",
        (SYNC_QUEUES,),
    ),
    Mutation(
        "queue-cache-unbounded-claim-keys", "leasequeue/store/scripts.py",
        "            if len(self._claim_keys) >= CACHED_QUEUES:  # ever new workers: start again\n",
        "            if False:\n",
        "the claim keys per (queue, worker) grow with every new worker a process makes on "
        "one App: no bound",
        (f"{BOUNDS}::test_ever_new_workers_keep_the_claim_keys_within_their_bound",),
    ),
    Mutation(
        "lanes-never-swept", "leasequeue/store/coalesce.py",
        "        if len(self._lanes) >= self._sweep_at:  # ever new queues\n",
        "        if False:\n",
        "the coalescer's lanes grow with every new queue an App is given: no bound",
        (APP_QUEUES, f"{BOUNDS}::test_a_sweep_of_lanes_keeps_the_busy_one_and_its_count"),
    ),
    Mutation(
        "lane-sweep-drops-busy-lanes", "leasequeue/store/coalesce.py",
        "                     if not (lane.calls or lane.jobs or lane.due)\n",
        "                     if True\n",
        "a sweep drops lanes with calls in flight too: the queue's next caller makes a new "
        "lane and a third call goes beside the two in flight, uncounted",
        (f"{BOUNDS}::test_a_sweep_of_lanes_keeps_the_busy_one_and_its_count",),
    ),
    Mutation(
        "lone-call-on-a-swept-lane", "leasequeue/store/coalesce.py",
        "        if lane is None or lanes.get(qk.queue) is not lane:\n",
        "        if lane is None:\n",
        "a lone call run after its lane was swept goes by the dropped lane: two lanes for "
        "one queue, the queue's lane not counting that call in flight",
        (f"{BOUNDS}::test_a_lone_call_whose_lane_was_swept_before_it_ran_takes_the_queue_s_lane",),
    ),
    Mutation(
        "lane-sweep-keeps-closed-loops-lanes", "leasequeue/store/coalesce.py",
        "                     or (lane.loop is not None and lane.loop.is_closed())]:\n",
        "                     ]:\n",
        "a lane left busy by an event loop closed mid-call is never swept: each such queue "
        "keeps its lane for good",
        (f"{BOUNDS}::test_a_sweep_drops_a_lane_left_busy_by_a_closed_loop",),
    ),
    Mutation(
        "one-job-heads-unbounded", "leasequeue/store/scripts.py",
        "        if len(heads) >= ONE_JOB_HEADS:\n",
        "        if False:\n",
        "the one-job heads grow with every new (queue, job name) a producer is given: no "
        "bound",
        (f"{ONE_JOB}::test_the_heads_kept_are_bounded",),
    ),
    Mutation(
        "lane-sweep-drops-without-reset", "leasequeue/store/coalesce.py",
        "            _reset(lanes.pop(name))  # (a closed loop's calls, closed later, count for "
        "nothing)\n",
        "            lanes.pop(name)\n",
        "a lane left busy by a closed loop is dropped as it was: when the old loop's lone "
        "call is closed later, its return asks the closed loop to send its parked callers "
        "(RuntimeError: Event loop is closed)",
        (f"{BOUNDS}::test_a_sweep_drops_a_lane_left_busy_by_a_closed_loop",
         f"{BOUNDS}::{SWEEP_RULE}"),
    ),
    Mutation(
        "lane-sweep-keeps-only-calls", "leasequeue/store/coalesce.py",
        "                     if not (lane.calls or lane.jobs or lane.due)\n",
        "                     if not lane.calls\n",
        "a sweep drops a lane whose callers wait for a send due with no call in flight (both "
        "calls returned in one turn): its send goes from the dropped lane, uncounted, beside "
        "the queue's new lane's calls",
        (f"{BOUNDS}::{SWEEP_RULE}",),
    ),
    Mutation(
        "lane-sweep-at-a-fixed-bound", "leasequeue/store/coalesce.py",
        "        self._sweep_at = max(CACHED_QUEUES, 2 * len(lanes))\n",
        "        self._sweep_at = CACHED_QUEUES\n",
        "with CACHED_QUEUES busy lanes or more, every new queue's first call scans them all",
        (f"{BOUNDS}::{SWEEP_RULE}",),
    ),
    Mutation(
        "lane-returns-connection-class-error-replies", "leasequeue/store/direct.py",
        "    if isinstance(reply, RedisError):  # hiredis gives error replies as values\n",
        "    if isinstance(reply, ResponseError):  # hiredis gives error replies as values\n",
        "the async lane's read raises only ResponseError values: a -LOADING reply (redis-py's "
        "BusyLoadingError, a ConnectionError) comes back as the script's value",
        (f"{LOADING}::test_the_async_lane_raises_a_loading_reply_and_enqueue_says_redis_is_"
         "unavailable",),
    ),
    Mutation(
        "spin-returns-connection-class-error-replies", "leasequeue/store/direct.py",
        "            if isinstance(reply, RedisError):  # (as _read)\n",
        "            if isinstance(reply, ResponseError):  # (as _read)\n",
        "a reply the spin read off the socket is raised only when a ResponseError: a -LOADING "
        "reply comes back as the one-job enqueue's value",
        (f"{LOADING}::test_the_async_lane_raises_a_loading_reply_and_enqueue_says_redis_is_"
         "unavailable",),
    ),
    Mutation(
        "sync-lane-returns-connection-class-error-replies", "leasequeue/store/sync_lane.py",
        "    if isinstance(reply, RedisError):  # hiredis gives error replies as values\n",
        "    if isinstance(reply, ResponseError):  # hiredis gives error replies as values\n",
        "the sync lane raises only ResponseError values: a -LOADING reply comes back as "
        "SyncApp.enqueue's value",
        (f"{LOADING}::test_the_sync_lane_raises_a_loading_reply_and_enqueue_says_redis_is_"
         "unavailable",),
    ),
    Mutation(
        "lane-keeps-idle-in-a-forked-child", "leasequeue/store/direct.py",
        "        KEPT_IN_CHILD.extend(self._idle)\n        self._idle.clear()\n",
        "",
        "a forked child keeps its lane's idle connections: its calls go out on the parent's "
        "sockets",
        (f"{LOOPS}::test_a_forked_child_calls_on_connections_of_its_own_and_the_parent_s_stay_in_"
         "step",
         f"{LOOPS}::test_a_child_killed_after_its_write_leaves_the_parent_s_replies_in_step"),
    ),
    Mutation(
        "lane-keeps-the-pool-in-a-forked-child", "leasequeue/store/connection.py",
        "        pool._available_connections = []\n"
        "        pool._in_use_connections = set()\n",
        "        pass\n",
        "a forked child's lane forgets its idle connections but not its pool's: it is handed "
        "one of the parent's sockets next",
        (f"{LOOPS}::test_a_forked_child_calls_on_connections_of_its_own_and_the_parent_s_stay_in_"
         "step",),
    ),
    Mutation(
        "lane-uses-another-loop-s-idle-connection", "leasequeue/store/direct.py",
        "        if idle and not _here(idle[-1]):\n",
        "        if False:\n",
        "an App used again on a new event loop writes on the closed loop's transport: its "
        "script runs, then the call fails",
        (f"{LOOPS}::test_an_app_used_again_on_a_new_loop_enqueues_once_on_a_connection_of_that_"
         "loop",),
    ),
    Mutation(
        "lone-call-resets-a-live-loop-s-lane", "leasequeue/store/coalesce.py",
        "            if old is not None and lane.forks == _FORKS[0] and not old.is_closed():\n",
        "            if False:\n",
        "a call on another loop resets a lane busy on a loop that lives but is stopped: that "
        "loop's parked callers are dropped unanswered",
        ("tests/test_coalesce.py::test_a_busy_lane_of_a_loop_that_lives_is_left_to_it_while_"
         "another_loop_enqueues",),
    ),
    Mutation(
        "rate-refund-sent-again", "leasequeue/store/scripts.py",
        "ONCE_RATE_MODES = frozenset({\"refund\", \"try\"})",
        "ONCE_RATE_MODES = frozenset({\"try\"})",
        "a rate refund whose reply was lost is sent again: each start is given back twice, "
        "and the key lets one more start in than its rate",
        ("tests/test_retried_calls.py::test_a_refund_whose_reply_was_lost_gives_its_start_back_"
         "once",),
    ),
    Mutation(
        "rate-try-sent-again", "leasequeue/store/scripts.py",
        "ONCE_RATE_MODES = frozenset({\"refund\", \"try\"})",
        "ONCE_RATE_MODES = frozenset({\"refund\"})",
        "a rate try whose reply was lost is sent again: it finds the start it took spent, "
        "answers DENIED, and its job is skipped within its rate",
        ("tests/test_retried_calls.py::test_a_try_whose_reply_was_lost_is_not_sent_again_to_"
         "deny_what_it_took",),
    ),
    Mutation(
        "renew-takes-the-eviction-marker", "lua/limiter_renew.lua",
        "  elseif redis.call('ZSCORE', evicted_key, ARGV[i]) then\n",
        "  elseif redis.call('ZREM', evicted_key, ARGV[i]) == 1 then\n",
        "a renew takes an evicted holder's marker with its first EVICTED: the same renew sent "
        "again after a lost reply answers LOST, and the replaced run is failed and run again",
        ("tests/test_retried_calls.py::test_a_renew_of_an_evicted_holder_sent_again_is_told_"
         "evicted_again",
         "tests/test_store_v2.py::test_limiter_replace_tells_the_evicted_holder_until_its_"
         "release"),
    ),
    Mutation(
        "script-load-lets-the-read-timer-s-error-out", "leasequeue/store/direct.py",
        "    except _ReadTimeout:\n        raise RedisTimeoutError("
        "\"Timeout reading from socket\") from None\n",
        "    except _NotDirect:\n        raise\n",
        "a read timer that fired as a NOSCRIPT came in makes the script's load raise the lane's "
        "own _ReadTimeout: untranslated, and the call not sent again",
        ("tests/test_direct.py::test_a_read_timer_firing_as_a_noscript_comes_in_times_the_call_"
         "out_and_retries_it",),
    ),
    Mutation(
        "fork-lets-the-child-finalize-the-parent-s-pool", "leasequeue/store/connection.py",
        "        KEPT_IN_CHILD.extend(available)\n        KEPT_IN_CHILD.extend(in_use)\n",
        "",
        "a forked child drops its pool's connections, the parent's, to the collector: "
        "finalized under the child's loop, each closes its transport and takes its descriptor "
        "out of the epoll set the two share",
        ("tests/test_lane_loops.py::test_a_forked_child_calls_on_connections_of_its_own_and_the_parent_s_stay_in_step",),
    ),
    Mutation(
        "lane-takes-a-pooled-connection-of-another-loop", "leasequeue/store/direct.py",
        "            if _here(conn):\n                return conn\n",
        "            if True:\n                return conn\n",
        "the lane takes a connection the pool of a client of the caller's own kept from a "
        "closed loop (a pipeline's): its call writes on that loop's transport and waits out "
        "its timeout",
        (
            "tests/test_lane_loops.py::test_the_lane_takes_no_connection_of_the_old_loop_from_a_client_of_the_caller_s_own",),
    ),
    Mutation(
        "lane-forgets-by-a-new-list", "leasequeue/store/direct.py",
        "        self._idle[:] = keep\n",
        "        self._idle = keep\n",
        "the lane forgets another loop's connections in a new list: a call of that loop "
        "holding the old one puts its connection back where nobody reads it, out of every count",
        ("tests/test_lane_loops.py::test_a_call_of_a_stopped_loop_puts_its_connection_back_where_the_lane_finds_it",),
    ),
    Mutation(
        "lane-reads-the-loop-off-the-transport", "leasequeue/store/direct.py",
        "    loop = getattr(reader, \"_loop\", None)  # (a protocol of an older stream says "
        "nothing)\n",
        "    loop = getattr(getattr(getattr(conn, \"_writer\", None), \"transport\", None), "
        "\"_loop\", None)\n",
        "a connection's loop is read off its transport, which uvloop's does not expose: on "
        "uvloop every pooled connection of a closed loop is taken as of this one",
        (
            "tests/test_lane_loops.py::test_the_lane_takes_no_connection_of_the_old_loop_from_a_client_of_the_caller_s_own",),
    ),
    Mutation(
        "hot-path-takes-another-loop-s-idle-connection", "leasequeue/store/direct.py",
        "    if proto is not None and proto.stream is conn._reader:\n        return "
        "task_of(proto.loop) is not None\n",
        "    if proto is not None and proto.stream is conn._reader:\n        return True\n",
        "run()'s hot path takes an idle connection of a closed loop: its script runs on that "
        "loop's transport, then the call fails",
        ("tests/test_lane_loops.py::test_an_app_used_again_on_a_new_loop_enqueues_once_on_a_connection_of_that_loop",),
    ),
    Mutation(
        "expired-ahead-refund-fails-the-take", "leasequeue/runtime/rates.py",
        "                    except (RedisUnavailable, ScriptError) as exc:\n                  "
        "      self._warn(use, exc)\n            ahead",
        "                    except ZeroDivisionError as exc:\n                        "
        "self._warn(use, exc)  # type: ignore[arg-type]\n            ahead",
        "the give-back of expired starts ahead, sent once, fails the take behind it: every run "
        "of the batch goes back as if the limiter were down",
        ("tests/test_retried_calls.py::test_a_failed_give_back_of_expired_starts_ahead_spares_the_take_behind_it",),
    ),
    Mutation(
        "local-eviction-markers-never-lapse", "leasequeue/limiter.py",
        "        _drop_past(self._evicted, name)\n        evicted = self._evicted.get(name, {})\n"
        "    "
        "    answers = []\n",
        "        evicted = self._evicted.get(name, {})\n        answers = []\n",
        "LocalLimiter's eviction markers never lapse: a run whose release never came is told "
        "EVICTED for the life of the process, and its marker is kept",
        ("tests/test_store_v2.py::test_local_limiter_mirrors_the_eviction_answer",),
    ),
    Mutation(
        "cluster-client-resends-once-only-calls", "leasequeue/store/scripts.py",
        "        elif not retry and is_cluster(self._redis):\n",
        "        elif False:\n",
        "on a cluster a rate refund or try goes through redis-py's cluster client, which sends "
        "it again after a lost reply: a start given back twice, a try answered DENIED",
        ("tests/test_cluster.py::test_a_once_only_rate_call_whose_reply_was_lost_is_not_sent_again_on_the_cluster",),
    ),
    Mutation(
        "once-only-call-gives-up-on-noscript", "leasequeue/store/direct.py",
        "    except NoScriptError:  # (not run: loaded, then sent)\n",
        "    except ZeroDivisionError:\n",
        "a once-only call on a cluster fails where its script was flushed, instead of loading it "
        "and sending it (NOSCRIPT: Redis did not run it)",
        ("tests/test_cluster.py::test_a_once_only_rate_call_loads_its_script_where_it_was_flushed",),
    ),
    Mutation(
        "connection-of-a-closed-loop-counts-as-connected", "leasequeue/store/connection.py",
        "    if loop.is_closed():\n        return True\n",
        "    if loop.is_closed():\n        return False\n",
        "a redis-py connection whose stream is of a closed loop counts as connected: App's plain "
        "commands on a new loop, and its close, fail with a bare RuntimeError",
        ("tests/test_lane_loops.py::test_redis_py_s_own_calls_on_a_new_loop_never_take_a_connection_of_the_old_one",
         "tests/test_lane_loops.py::test_an_app_closed_on_a_new_loop_leaves_the_old_loop_s_connections_alone"),
    ),
    Mutation(
        "cluster-nodes-keep-redis-py-s-connections", "leasequeue/store/connection.py",
        "        _loop_aware_nodes(cluster)\n",
        "",
        "the cluster client's node connections are redis-py's own, not loop-aware: on a new loop "
        "every call of an App on a cluster fails with a bare RuntimeError",
        ("tests/test_cluster.py::test_an_app_on_the_cluster_used_again_on_a_new_loop_takes_no_connection_of_the_old_one",),
    ),
    Mutation(
        "sentinels-asked-on-redis-py-s-connections", "leasequeue/store/connection.py",
        "        pool.connection_class = _LOOP_AWARE.get(pool.connection_class, "
        "pool.connection_class)\n",
        "",
        "the connections that ask the sentinels for the master's address are redis-py's own: "
        "on a new loop each connect to the master fails with a bare RuntimeError",
        ("tests/test_cluster.py::test_an_app_on_sentinel_used_again_on_a_new_loop_takes_no_connection_of_the_old_one",),
    ),
    Mutation(
        "sentinel-master-connections-not-loop-aware", "leasequeue/store/connection.py",
        "    options.setdefault(\"connection_class\", LoopAwareSentinelConnection)\n",
        "",
        "the master's connections of a Sentinel App are redis-py's own: on a new loop each idle "
        "one handed out fails its call with a bare RuntimeError",
        ("tests/test_cluster.py::test_an_app_on_sentinel_used_again_on_a_new_loop_takes_no_connection_of_the_old_one",),
    ),
    Mutation(
        "ack-sent-again-refused", "lua/ack.lua",
        "  elseif meta and meta.state == outcome and tonumber(meta.token) == tonumber(ARGV[base + "
        "1]) then\n",
        "  elseif false then\n",
        "an ack sent again after its reply was lost is refused: the worker logs `lease lost` and "
        "tells hooks `lost` for a run whose result is stored",
        ("tests/test_retried_calls.py::test_an_ack_whose_reply_was_lost_is_answered_finished_when_sent_again",
         "tests/test_scripts.py::test_ack_stores_result_and_refuses_stale"),
    ),
    Mutation(
        "rerun-sent-again", "leasequeue/app.py",
        "await self.scripts.enqueue(qk, [job], retry=False)",
        "await self.scripts.enqueue(qk, [job], retry=True)",
        "App.rerun's enqueue is sent again after its reply was lost: it answers existed for the "
        "re-run its first run made, and the next one is made too (the job re-run twice)",
        ("tests/test_retried_calls.py::test_a_rerun_whose_reply_was_lost_is_made_once",),
    ),
    Mutation(
        "rerun-probe-names-an-earlier-rerun", "leasequeue/app.py",
        "            if await self._has_record(qk, new_id):  # an earlier re-run's: the next n\n"
        "                continue\n",
        "",
        "App.rerun sends its call for an id an earlier re-run holds: after a lost reply its probe "
        "finds that re-run and answers it, and no new one is made",
        ("tests/test_retried_calls.py::test_a_second_rerun_whose_reply_was_lost_is_the_next_one",),
    ),
    Mutation(
        "fail-sent-again-refused", "lua/fail.lua",
        "  if again and last_error_is(errors_key, id, kind, err) then\n",
        "  if false then\n",
        "a failure sent again after its reply was lost is refused: the worker takes for lost a run "
        "whose failure was recorded (its retry or burial)",
        ("tests/test_retried_calls.py::test_a_failure_whose_reply_was_lost_is_answered_as_the_first_run_did",),
    ),
    Mutation(
        "fail-answers-a-reaped-lease-s-late-call", "lua/fail.lua",
        "  if again and last_error_is(errors_key, id, kind, err) then\n",
        "  if again then\n",
        "a failure of a run whose lease was reaped, arriving late under the same token, is "
        "answered as recorded: the worker reports a retry the reaper made, not a lost lease",
        ("tests/test_retried_calls.py::test_a_failure_whose_reply_was_lost_is_answered_as_the_first_run_did",),
    ),
    Mutation(
        "sentinel-connect-keeps-the-old-loop-s-stream", "leasequeue/store/connection.py",
        "        self._forget_elsewhere()  # (Sentinel's connect reads _reader, not "
        "is_connected)\n",
        "",
        "a connection's connect keeps another loop's stream: Sentinel's connect returns at once, "
        "and redis-py reconnects to the old loop's master address",
        ("tests/test_cluster.py::test_a_sentinel_connection_of_an_old_loop_asks_the_sentinels_again",),
    ),
    Mutation(
        "cluster-child-keeps-the-parent-s-node-connections", "leasequeue/store/connection.py",
        "        forget_in_child(cluster)\n",
        "",
        "a child forked mid-step keeps its App's cluster node connections, its parent's: the two "
        "processes read each other's replies",
        ("tests/test_cluster.py::test_a_child_forked_mid_step_calls_on_node_connections_of_its_own",),
    ),
    Mutation(
        "sentinel-child-asks-on-the-parent-s-sockets", "leasequeue/store/connection.py",
        "    forget_in_child(sentinel)\n",
        "",
        "a child forked mid-step keeps its Sentinel App's connections to the sentinels, its "
        "parent's: its question for the master fails on the parent's stream",
        ("tests/test_cluster.py::test_a_child_forked_mid_step_asks_the_sentinels_on_connections_of_its_own",),
    ),
    Mutation(
        "schedule-fire-sent-again-busy", "lua/schedule_fire.lua",
        "    if s.taker ~= taker or taker == '' then\n",
        "    if true then\n",
        "a schedule's fire sent again after its reply was lost finds its own fire pending and "
        "answers busy: nothing is enqueued until the fire's lease lapses (10 s)",
        ("tests/test_retried_calls.py::test_a_schedule_fire_whose_reply_was_lost_is_enqueued_at_once",
         "tests/test_schedules.py::test_fire_checks_due_on_the_server_clock_and_takes_each_fire_once"),
    ),
    Mutation(
        "schedule-fire-any-taker-is-its-own", "lua/schedule_fire.lua",
        "    if s.taker ~= taker or taker == '' then\n",
        "    if taker == '' then\n",
        "a pending fire is answered as taken to every worker that asks with the same read: "
        "two workers enqueue the same fire (deduplicated by its id only while the job is kept)",
        ("tests/test_schedules.py::test_fire_checks_due_on_the_server_clock_and_takes_each_fire_once",),
    ),
    Mutation(
        "schedule-take-over-keeps-the-dead-taker", "lua/schedule_fire.lua",
        "  s.until_ms = now + lease_ms\n  s.taker = taker\n",
        "  s.until_ms = now + lease_ms\n",
        "a fire taken over keeps its dead taker's id: the take-over's call sent again is answered "
        "busy, and the dead taker's id is answered as if it had taken it",
        ("tests/test_schedules.py::test_fire_checks_due_on_the_server_clock_and_takes_each_fire_once",),
    ),
    Mutation(
        "common-enqueue-resent-not-created", "leasequeue/app.py",
        "                drawn, (_, state) = await self.coalescer.enqueue(qk, job)\n"
        "                return _new(EnqueuedJob, (drawn, logical_queue, name, True, state))\n",
        "                drawn, (created, state) = await self.coalescer.enqueue(qk, job)\n"
        "                return _new(EnqueuedJob, (drawn, logical_queue, name, created, state))\n",
        "App.enqueue's common call sent again after a lost reply tells its caller created=False "
        "for the job its first run made (its id drawn here)",
        ("tests/test_retried_calls.py::test_an_enqueue_whose_reply_was_lost_tells_its_caller_created",),
    ),
    Mutation(
        "enqueue-resent-not-created", "leasequeue/producer.py",
        "    return created or job_id is None\n",
        "    return created\n",
        "an enqueue of a job whose id was drawn here, sent again after a lost reply, tells its "
        "caller created=False (App's longer call, the bulk calls, SyncApp)",
        ("tests/test_retried_calls.py::test_an_enqueue_whose_reply_was_lost_tells_its_caller_created",
         "tests/test_retried_calls.py::test_a_sync_enqueue_whose_reply_was_lost_tells_its_caller_created"),
    ),
    Mutation(
        "enqueue-resent-given-id-created", "leasequeue/producer.py",
        "    return created or job_id is None\n",
        "    return True\n",
        "an enqueue of a given id that exists tells its caller created=True: a duplicate reads as "
        "a new job",
        ("tests/test_retried_calls.py::test_an_enqueue_whose_reply_was_lost_tells_its_caller_created",
         "tests/test_retried_calls.py::test_a_sync_enqueue_whose_reply_was_lost_tells_its_caller_created"),
    ),
    Mutation(
        "bulk-resent-not-created", "leasequeue/producer.py",
        "        if not all(map(_CREATED, replies)):"
        "  # (a C loop: the common batch is all created)\n",
        "        if False:\n",
        "a bulk enqueue sent again after a lost reply tells its callers created=False for the jobs "
        "its first run made (their ids drawn here)",
        ("tests/test_retried_calls.py::test_an_enqueue_whose_reply_was_lost_tells_its_caller_created",
         "tests/test_retried_calls.py::test_a_sync_enqueue_whose_reply_was_lost_tells_its_caller_created"),
    ),
    Mutation(
        "bulk-resent-reads-the-call-as-one-span", "leasequeue/producer.py",
        "None if requests is None else requests[i].job_id),\n",
        "None if requests is None else requests[i - chunk[0]].job_id),\n",
        "a bulk call sent again after a lost reply answers each of its jobs by the request at its "
        "place in the call, not the request's own (a sharded batch's calls are scattered over it): "
        "a given id that existed reads created, a drawn one not",
        ("tests/test_retried_calls.py::test_a_sharded_bulk_enqueue_whose_second_call_lost_its_reply_answers_each_request",),
    ),
    Mutation(
        "scheduler-takes-fires-as-its-worker-id", "leasequeue/runtime/scheduler.py",
        "        self.taker = f\"{params.worker_id[:191]}.{os.urandom(4).hex()}\"\n",
        "        self.taker = params.worker_id\n",
        "a scheduler takes fires under its worker's id alone: a second live process given the same "
        "worker id is answered as the taker of a fire the first took, and both enqueue it",
        ("tests/test_retried_calls.py::test_a_schedule_fire_whose_reply_was_lost_is_enqueued_at_once",),
    ),
    Mutation(
        "coalesce-future-any-loop", "leasequeue/store/coalesce.py",
        "    if type(loop).create_future is _BASE_CREATE_FUTURE:\n",
        "    if True:\n",
        "a parked caller's future is asyncio's Future on every loop: a loop that gives futures of "
        "its own kind (uvloop's, a subclass's) gets asyncio's instead",
        ("tests/test_coalesce.py::test_a_parked_caller_s_future_is_its_loop_s_kind_on_each_loop_in_turn",),
    ),
    Mutation(
        "coalesce-future-of-the-first-loop", "leasequeue/store/coalesce.py",
        "        if lane.loop is not loop:\n"
        "            lane.loop, lane.future = loop, future_maker(loop)\n",
        "        if lane.future is _no_loop:\n"
        "            lane.future = future_maker(loop)\n"
        "        lane.loop = loop\n",
        "a lane's futures are made for the first loop it ran on: on a later loop its parked "
        "callers get futures of a closed loop, never answered there",
        ("tests/test_coalesce.py::test_a_parked_caller_s_future_is_its_loop_s_kind_on_each_loop_in_turn",),
    ),
    Mutation(
        "coalesce-inline-park-sends-nothing", "leasequeue/store/coalesce.py",
        "                if not lane.due and lane.calls < CALLS_IN_FLIGHT:\n"
        "                    lane.due = True\n"
        "                    loop.call_soon(self._send_due, qk, lane)\n"
        "                return future\n",
        "                return future\n",
        "callers parked behind a call in flight (EnqueueCoalescer.enqueue's inline park) ask for "
        "no call at the end of the turn: they wait for the call in flight to return instead of "
        "going beside it",
        ("tests/test_coalesce.py::test_callers_of_one_turn_go_beside_the_call_in_flight_and_the_rest_wait",),
    ),
    Mutation(
        "app-empty-any-version", "leasequeue/app.py",
        "                if version == self.registry.version:\n"
        "                    common = empties.get(name)\n",
        "                if True:\n"
        "                    common = empties.get(name)\n",
        "App.enqueue takes the commonest call's cached job whatever the registry's version: a "
        "registration that moves the name leaves its calls going to the old queue",
        (f"{COMMON}::test_a_registration_after_the_first_calls_moves_the_commonest_call_s_jobs",),
    ),
    Mutation(
        "app-empty-any-name", "leasequeue/app.py",
        "            if payload is None and name.__class__ is str:\n",
        "            if payload is None:\n",
        "App.enqueue looks any name up in the commonest call's cache: a name that cannot be "
        "hashed (a list) raises TypeError, not ConfigError",
        (f"{COMMON}::test_a_name_or_queue_that_is_not_a_str_gets_its_typed_error_and_writes_nothing",),
    ),
    Mutation(
        "app-empty-for-a-payload", "leasequeue/app.py",
        "            if payload is None and name.__class__ is str:\n",
        "            if name.__class__ is str:\n",
        "App.enqueue gives a call with a payload the name's cached job of no payload: its handler "
        "gets none of its arguments",
        (f"{COMMON}::test_the_common_call_stores_what_the_long_way_stores",),
    ),
    Mutation(
        "route-hashes-any-name", "leasequeue/producer.py",
        "        if name.__class__ is not str:\n"
        "            check_job_name(name)\n"
        "        definition = self.registry.find(name)\n",
        "        definition = self.registry.find(name)\n",
        "a job name that cannot be hashed (a list) raises TypeError from the registry's lookup, "
        "not ConfigError",
        (f"{COMMON}::test_a_name_or_queue_that_is_not_a_str_gets_its_typed_error_and_writes_nothing",),
    ),
    Mutation(
        "shape-routes-hash-any-name", "leasequeue/producer.py",
        "        if routes is None or r.name.__class__ is not str or not (\n"
        "                r.queue is None or r.queue.__class__ is str):\n",
        "        if routes is None:\n",
        "a batch's request whose job name or queue cannot be hashed (a list) raises TypeError "
        "from the batch's routes, not ConfigError",
        (f"{COMMON}::test_a_name_or_queue_that_is_not_a_str_gets_its_typed_error_and_writes_nothing",),
    ),
    Mutation(
        "shards-hash-any-queue", "leasequeue/store/shards.py",
        "        if name.__class__ is not str:\n"
        "            check_queue_name(name)\n"
        "        known = self._keys.get(name)\n",
        "        known = self._keys.get(name)\n",
        "a queue name that cannot be hashed (a list) raises TypeError from the keys' cache, not "
        "ConfigError",
        (f"{COMMON}::test_a_name_or_queue_that_is_not_a_str_gets_its_typed_error_and_writes_nothing",),
    ),
    Mutation(
        "answer-all-never", "leasequeue/store/coalesce.py",
        "            if loop.get_debug():  # (asyncio's own way: a handle a callback, "
        "each timed)\n",
        "            if True:\n",
        "a batch's callers are answered the usual way, each future scheduling its caller's "
        "wake-up through call_soon (a handle a caller: a quarter of the instructions of a call "
        "from 100 tasks on asyncio's loop), in debug mode or not",
        ("tests/test_coalesce.py::test_a_batch_s_callers_are_woken_in_one_handle_of_the_loop",),
    ),
    Mutation(
        "answer-all-in-debug-mode", "leasequeue/store/coalesce.py",
        "            if loop.get_debug():  # (asyncio's own way: a handle a callback, "
        "each timed)\n",
        "            if False:\n",
        "in debug mode a batch's callers are woken in one handle too: the loop's slow-callback "
        "check times the batch, not each caller's step",
        ("tests/test_coalesce.py::test_a_batch_s_callers_are_woken_in_one_handle_of_the_loop",),
    ),
    Mutation(
        "answer-all-runs-a-callback-in-its-adder-s-stead", "leasequeue/store/coalesce.py",
        "                context.run(callback, future)\n",
        "                callback(future)\n",
        "answer_all runs a future's lone callback in the context of the handle, not the one the "
        "callback was added in: a context variable the callback reads is not its caller's",
        ("tests/test_coalesce.py::"
         "test_answer_all_runs_a_lone_callback_in_its_context_and_leaves_the_rest_to_the_loop",),
    ),
    Mutation(
        "answer-all-hides-a-callback-s-error", "leasequeue/store/coalesce.py",
        "                loop.call_exception_handler({\n",
        "                (lambda context: None)({\n",
        "answer_all swallows an exception a callback raised: nothing reports it to the loop's "
        "exception handler, as asyncio reports a callback's error",
        ("tests/test_coalesce.py::"
         "test_answer_all_runs_a_lone_callback_in_its_context_and_leaves_the_rest_to_the_loop",),
    ),
    Mutation(
        "answer-all-strands-the-rest-on-interrupt", "leasequeue/store/coalesce.py",
        "        for future, answer in pairs:  # (left by SystemExit or KeyboardInterrupt)\n"
        "            if not future.done():\n"
        "                future.set_result(answer)\n",
        "        pass\n",
        "a callback that raises KeyboardInterrupt inside answer_all leaves the batch's later "
        "callers waiting for ever",
        ("tests/test_coalesce.py::"
         "test_answer_all_interrupted_by_a_callback_answers_the_rest_the_usual_way",),
    ),
    Mutation(
        "answer-all-takes-one-of-two-callbacks", "leasequeue/store/coalesce.py",
        "            if callbacks is None or len(callbacks) != 1:\n",
        "            if callbacks is None:\n",
        "answer_all runs the first of a future's two callbacks itself, in the handle, and leaves "
        "the second to the loop: the two run apart, the first before the loop's turn",
        ("tests/test_coalesce.py::"
         "test_answer_all_runs_a_lone_callback_in_its_context_and_leaves_the_rest_to_the_loop",),
    ),
)
