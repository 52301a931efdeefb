-- resource_clear.lua: a resource was closed (by its run, or by a reconciler):
-- drop its ledger entry, fenced by its owner run, so that an entry a newer
-- run recorded under the same key stays. Idempotent.
-- KEYS[1] entry        HASH   see resource_open.lua
-- KEYS[2] expiry       ZSET   kind:key -> when its TTL runs out (ms)
-- KEYS[3] worker       SET    kind:key of the entries the owner's worker id opened
-- ARGV[1] member           str   kind:key
-- ARGV[2] queue            str   the owner run: physical queue,
-- ARGV[3] job              str   job id,
-- ARGV[4] token            int   and fencing token
-- Returns: CODE_CLEARED, or CODE_GONE (no entry of that owner: nothing removed
--          but stale index entries)
-- Sent again: the entry the first run dropped is gone, so the second removes the (already
-- removed) index entries again and answers CODE_GONE where the first answered CODE_CLEARED.
local CODE_GONE, CODE_CLEARED = 0, 1
local entry_key, expiry_key, worker_key = KEYS[1], KEYS[2], KEYS[3]
local member, queue, job, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local e = redis.call('HMGET', entry_key, 'queue', 'job', 'token', 'worker')
if not e[2] then
  redis.call('ZREM', expiry_key, member)
  redis.call('SREM', worker_key, member)
  return CODE_GONE
end
if e[1] ~= queue or e[2] ~= job or e[3] ~= token then
  return CODE_GONE
end
redis.call('DEL', entry_key)
redis.call('ZREM', expiry_key, member)
redis.call('SREM', worker_key, member)
return CODE_CLEARED
