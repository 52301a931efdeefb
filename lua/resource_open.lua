-- resource_open.lua: record in the ledger that a run opens an external
-- resource (kind, key), before it opens it. A key another run still holds
-- is not taken: the caller learns the holder (and sweeps it when that run is
-- no longer live: resource_claim, close, resource_clear, then this again),
-- or that a reconciler is closing it right now. Idempotent for its owner.
-- KEYS[1] entry        HASH   kind, key, queue, job, token, worker, life, opened_ms,
--                             ttl_ms, closer, closing_until
-- KEYS[2] expiry       ZSET   kind:key -> when its TTL runs out (ms, server clock)
-- KEYS[3] worker       SET    kind:key of the entries this worker id opened
-- ARGV[1] member           str   kind:key
-- ARGV[2] kind             str   the resource kind
-- ARGV[3] key              str   the resource key
-- ARGV[4] queue            str   the owner run's physical queue
-- ARGV[5] job              str   the owner run's job id
-- ARGV[6] token            int   the owner run's fencing token
-- ARGV[7] worker_id        str   the owner run's worker
-- ARGV[8] life             str   the worker process's life id (one per boot)
-- ARGV[9] ttl_ms           int   after this the janitor may close it (owner not live)
-- Returns: {code, ...}; CODE_OPENED (recorded, or already this owner's),
--          CODE_HELD + {queue, job, token, worker, life} of the holder,
--          CODE_CLOSING + {wait_ms} (a reconciler is closing the old one)
-- Sent again: the entry the first run wrote names this owner, so the second writes nothing and
-- answers CODE_OPENED again (CODE_HELD and CODE_CLOSING answer as before).
local CODE_OPENED, CODE_HELD, CODE_CLOSING = 1, 2, 3
local entry_key, expiry_key, worker_key = KEYS[1], KEYS[2], KEYS[3]
local member, kind, key = ARGV[1], ARGV[2], ARGV[3]
local queue, job, token, worker_id, life = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local ttl_ms = tonumber(ARGV[9])

local now = now_ms()
local e = redis.call('HMGET', entry_key, 'queue', 'job', 'token', 'worker', 'life', 'closer',
                     'closing_until')
if e[2] then
  if e[1] == queue and e[2] == job and e[3] == token then
    return {CODE_OPENED}
  end
  if (e[6] or '') ~= '' and (tonumber(e[7]) or 0) > now then
    return {CODE_CLOSING, int(tonumber(e[7]) - now)}
  end
  return {CODE_HELD, e[1], e[2], e[3], e[4] or '', e[5] or ''}
end
redis.call('HSET', entry_key, 'kind', kind, 'key', key, 'queue', queue, 'job', job,
           'token', token, 'worker', worker_id, 'life', life, 'opened_ms', int(now),
           'ttl_ms', int(ttl_ms), 'closer', '', 'closing_until', 0)
redis.call('ZADD', expiry_key, int(now + ttl_ms), member)
redis.call('SADD', worker_key, member)
return {CODE_OPENED}
