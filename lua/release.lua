-- release.lua: hand leased jobs back without counting the run as an attempt
-- (graceful shutdown, slot busy); fenced by token, idempotent. A started
-- run's attempt is refunded; a run never started had none counted. A job
-- whose cancel was requested ends canceled instead. A run woken while still
-- leased (wake.lua left a wake-pending mark: the keyed slot it was refused
-- freed before this release) goes back in line at once, not after delay_ms.
-- KEYS[1] leases       ZSET   leased ids
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> last error
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] ready        ZSET   claimable ids
-- KEYS[7] scheduled    ZSET   delayed ids
-- KEYS[8] done         ZSET   finished ids
-- KEYS[9] stats        HASH   counters
-- KEYS[10] wake         LIST   wake-up tokens
-- KEYS[11] events       STREAM audit trail
-- KEYS[12] logs         HASH   id -> captured run logs
-- KEYS[13] waiting      ZSET   ids someone waits for (App.wait)
-- KEYS[14] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- KEYS[15] woken        ZSET   wake-pending marks `<id>:<token>` (wake.lua)
-- KEYS[16] parked       HASH   park group -> `next_us|interval_us` (claim.lua)
-- ARGV[1] delay_ms         int   0 = back in line at its old place; > 0 = scheduled
-- ARGV[2] retention_ms     int   how long a canceled record is kept
-- ARGV[3] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[4] why              str   recorded in the audit trail
-- ARGV[5] unpark           0|1   1 = the jobs hold a rate reservation: clear their park
--                                group (a claim must lease them when they come due)
-- ARGV[6] park_grp         str   a rate key found over its rate ('' = none): its
--                                group is parked, see claim.lua
-- ARGV[7] park_in_us       int   when that key's next start is expected, from now
-- ARGV[8] interval_us      int   one start per this many microseconds on that key
-- ARGV[9..] per job, 2 values: id, token
-- Returns: per job CODE_RELEASED, CODE_CANCELED (cancel was requested),
--          CODE_REFUSED (stale token or not leased)
-- Sent again: the first run took the jobs out of leased, so the second writes nothing for them
-- (no count, event or wake twice) and answers CODE_REFUSED where the first answered
-- CODE_RELEASED or CODE_CANCELED: the worker takes the run for lost. A park_grp is recorded
-- again, its next start later by the time between the two runs.
local CODE_REFUSED, CODE_RELEASED, CODE_CANCELED = 0, 1, 2
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local stats_key, wake_key, events_key = KEYS[9], KEYS[10], KEYS[11]
local logs_key, waiting_key, woken_key, parked_key = KEYS[12], KEYS[13], KEYS[15], KEYS[16]
local delay_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local events_maxlen, why = tonumber(ARGV[3]), ARGV[4]
local unpark, park_grp = ARGV[5] == '1', ARGV[6]
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = logs_key,
           runstate = KEYS[14]}

local now = now_ms()
local reply = {}
local released = 0
for base = 9, #ARGV, 2 do
  local id, token = ARGV[base], tonumber(ARGV[base + 1])
  local meta = load_meta(jobs_key, id)
  if meta and meta.state == 'leased' and tonumber(meta.token) == token then
    redis.call('ZREM', leases_key, id)
    if meta.started == '1' then
      meta.attempt = math.max(0, tonumber(meta.attempt) - 1)
    end
    if tonumber(meta.cancel) == 1 then
      emit(events_key, events_maxlen, id, 'canceled', why, 'worker:' .. meta.worker,
           jobs_key, payloads_key)
      finish(meta, id, now, 'canceled', retention_ms, k)
      redis.call('HINCRBY', stats_key, 'canceled', 1)
      signal(waiting_key, {id})
      reply[#reply + 1] = CODE_CANCELED
    else
      local delay = delay_ms
      if delay > 0 and redis.call('ZREM', woken_key, id .. ':' .. int(token)) == 1 then
        delay = 0 -- woken while leased: the slot it waits for is free
      end
      if unpark then
        meta.grp = nil
      end
      requeue(meta, id, now, delay, ready_key, scheduled_key)
      save_meta(jobs_key, id, meta)
      emit(events_key, events_maxlen, id, 'released', why, 'worker:' .. meta.worker,
           jobs_key, payloads_key)
      released = released + 1
      reply[#reply + 1] = CODE_RELEASED
    end
  else
    reply[#reply + 1] = CODE_REFUSED
  end
end
if released > 0 then
  wake(wake_key, released, released)
end
-- park the key's group: claims schedule its queued jobs one interval apart
-- from the key's next expected start (kept when a later one is recorded)
if park_grp ~= '' then
  local next_us = now * 1000 + tonumber(ARGV[7])
  local raw = redis.call('HGET', parked_key, park_grp)
  local recorded = raw and tonumber(string.match(raw, '^(%d+)|')) or 0
  if next_us > recorded then
    redis.call('HSET', parked_key, park_grp, int(next_us) .. '|' .. int(tonumber(ARGV[8])))
    local keep_ms = math.ceil(tonumber(ARGV[7]) / 1000) + 60000
    if redis.call('PTTL', parked_key) < keep_ms then
      redis.call('PEXPIRE', parked_key, keep_ms)
    end
  end
end
return reply
