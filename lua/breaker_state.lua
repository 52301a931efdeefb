-- breaker_state.lua: read one breaker (for stats and the CLI), with the
-- server clock, so that "open for another N ms" needs no client clock.
-- KEYS[1] state        HASH   see breaker_check.lua
-- KEYS[2] failures     ZSET   failure id -> instant (ms, server clock)
-- ARGV[1] window_ms        int   failures counted within this window
-- Returns: {now_ms, failures in the window, flat field/value list of state}
-- Sent again: reads only: the same answer as a first run at that moment (now_ms and the
-- failures in the window as of the second run).
local state_key, failures_key = KEYS[1], KEYS[2]
local window_ms = tonumber(ARGV[1])

local now = now_ms()
local failures = redis.call('ZCOUNT', failures_key, int(now - window_ms), '+inf')
return {int(now), failures, redis.call('HGETALL', state_key)}
