-- schedule_list.lua: a read-only snapshot of the schedules of a prefix, with
-- the server clock, for the scheduler loop and the CLI. Bounded by the number
-- of declared schedules (capped by max_schedules).
-- KEYS[1] specs        HASH   schedule name -> spec JSON
-- KEYS[2] state        HASH   schedule name -> next_ms|paused|pending_ms|pending_until_ms[|taker]
-- ARGV[1] max_schedules    int   most schedules returned
-- Returns: {now_ms, n, then per schedule: name, spec, state (false: none)},
--          names in sorted order
-- Sent again: reads only: the same answer as a first run at that moment (its now_ms is the
-- second run's).
local specs_key, state_key = KEYS[1], KEYS[2]
local max_schedules = tonumber(ARGV[1])

local names = redis.call('HKEYS', specs_key)
table.sort(names)
local reply = {int(now_ms()), 0}
for i = 1, math.min(#names, max_schedules) do
  local name = names[i]
  reply[#reply + 1] = name
  reply[#reply + 1] = redis.call('HGET', specs_key, name)
  reply[#reply + 1] = redis.call('HGET', state_key, name)
  reply[2] = i
end
return reply
