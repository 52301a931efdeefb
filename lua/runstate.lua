-- runstate.lua: a run writes what it leaves for the job's next attempt — its
-- checkpoints, its saga's step outcomes, or its progress — fenced by token:
-- refused unless the job is leased under this run's token, so a stale run
-- (reaped, or its lease taken) can never write one. Kept for the job's
-- retention: forget() in _lib.lua deletes the three fields with the record.
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] runstate     HASH   'c:' id -> checkpoints, 's:' id -> saga, 'p:' id -> progress
-- KEYS[3] events       STREAM audit trail
-- ARGV[1] id               str
-- ARGV[2] token            int
-- ARGV[3] kind             c | s | p   (checkpoints | saga | progress)
-- ARGV[4] value            bytes the whole new value (c, s: msgpack from Python, opaque
--                          here); p: `fraction US note`, stored as `at_ms US fraction US note`
-- ARGV[5] max_bytes        int   the largest value accepted
-- ARGV[6] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[7] detail           str   the event's detail ('' = no event)
-- Returns: CODE_SAVED, CODE_LOST (stale token, or the job is not leased), or
--          CODE_TOO_LARGE (nothing written)
-- Sent again: the run still holds its lease, so the second run writes the same value again (a
-- progress value stamped with the second run's clock) and answers CODE_SAVED again; with a
-- detail, the audit trail gets a second entry. CODE_LOST and CODE_TOO_LARGE answer as before.
local CODE_LOST, CODE_SAVED, CODE_TOO_LARGE = 0, 1, 2
local jobs_key, runstate_key, events_key = KEYS[1], KEYS[2], KEYS[3]
local id, token, kind, value = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local max_bytes, events_maxlen, detail = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local EVENTS = {c = 'checkpoint', s = 'saga', p = 'progress'}

if not EVENTS[kind] then
  return redis.error_reply('runstate: unknown kind ' .. kind)  -- a bug in the caller
end
local meta = load_meta(jobs_key, id)
if not meta or meta.state ~= 'leased' or tonumber(meta.token) ~= token then
  return CODE_LOST
end
if #value > max_bytes then
  return CODE_TOO_LARGE
end
if kind == 'p' then
  value = int(now_ms()) .. US .. value
end
redis.call('HSET', runstate_key, kind .. ':' .. id, value)
if detail ~= '' then
  emit(events_key, events_maxlen, id, EVENTS[kind], detail)
end
return CODE_SAVED
