-- start.lua: a worker starts runs it leased not started (claim.lua with
-- start_now below the batch): each run's attempt is counted once, however
-- often this is called; fenced by token.
-- KEYS[1] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[2] jobs         HASH   id -> job record
-- ARGV[1..] per job, 2 values: id, token
-- Returns: per job CODE_STARTED (now or before), CODE_CANCEL_REQUESTED (started,
--          but a cancel was requested: stop it), CODE_LOST (stale token, not leased)
-- Sent again: the runs are started already, so no attempt is counted twice: the second writes
-- nothing and answers as the first (CODE_STARTED, CODE_CANCEL_REQUESTED or CODE_LOST).
local CODE_LOST, CODE_STARTED, CODE_CANCEL_REQUESTED = 0, 1, 2
local leases_key, jobs_key = KEYS[1], KEYS[2]

local reply = {}
for base = 1, #ARGV, 2 do
  local id, token = ARGV[base], tonumber(ARGV[base + 1])
  local meta = load_meta(jobs_key, id)
  if meta and meta.state == 'leased' and tonumber(meta.token) == token
      and redis.call('ZSCORE', leases_key, id) then
    if meta.started ~= '1' then
      meta.started = 1
      meta.attempt = tonumber(meta.attempt) + 1
      save_meta(jobs_key, id, meta)
    end
    if meta.cancel == '1' then
      reply[#reply + 1] = CODE_CANCEL_REQUESTED
    else
      reply[#reply + 1] = CODE_STARTED
    end
  else
    reply[#reply + 1] = CODE_LOST
  end
end
return reply
