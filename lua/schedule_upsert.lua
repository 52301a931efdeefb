-- schedule_upsert.lua: record a declared schedule. A new one is created; a
-- changed spec (or a state edited into nonsense) replaces the record's spec
-- and next fire, keeping its paused flag; the same spec leaves it alone.
-- KEYS[1] specs        HASH   schedule name -> spec JSON
-- KEYS[2] state        HASH   schedule name -> next_ms|paused|pending_ms|pending_until_ms[|taker]
-- ARGV[1] name             str   the schedule's name
-- ARGV[2] spec             str   its spec JSON (compared as text)
-- ARGV[3] next_ms          int   its first fire, computed from the server clock
-- ARGV[4] paused           0|1   the paused flag of a new record
-- Returns: CODE_CREATED, CODE_UPDATED or CODE_UNCHANGED
-- Sent again: the spec and state the first run wrote are there, so the second writes nothing
-- and answers CODE_UNCHANGED where the first answered CODE_CREATED or CODE_UPDATED.
local CODE_UNCHANGED, CODE_CREATED, CODE_UPDATED = 0, 1, 2
local specs_key, state_key = KEYS[1], KEYS[2]
local name, spec = ARGV[1], ARGV[2]
local next_ms = tonumber(ARGV[3])
local paused = ARGV[4]

local old_spec = redis.call('HGET', specs_key, name)
local state = parse_schedule(redis.call('HGET', state_key, name))
if old_spec == spec and state then
  return CODE_UNCHANGED
end
redis.call('HSET', specs_key, name, spec)
if state then
  state.next_ms = next_ms
  save_schedule(state_key, name, state)
  return CODE_UPDATED
end
local code = CODE_CREATED
if old_spec then
  code = CODE_UPDATED
end
save_schedule(state_key, name, {next_ms = next_ms, paused = paused, pending = 0, until_ms = 0})
return code
