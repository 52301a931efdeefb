-- rate.lua: one rate limit key (GCRA on the server clock, in microseconds).
-- The state is a theoretical arrival time `tat`: a start is allowed while
-- now >= tat - tolerance, and each start moves tat on by one interval. A job
-- over the rate is not refused: it reserves the next free instant (tat moves
-- on as if it had started) and is told how long to wait, so the jobs of a
-- backlog each cost one call, are spaced one interval apart and never race.
-- A second meter, `real`, counts the starts that happened: a reservation
-- redeemed late (its job was claimed late) also needs room there, so late
-- jobs cannot start in a clump above the burst; they wait a little more.
-- Its tolerance has SLACK_US more, so the jitter of claims (a few ms) does
-- not send on-time jobs round again: at most burst + SLACK_US worth at once.
-- Starts ahead: a take or try may also ask for up to `ahead` starts with no
-- holder, which the worker spends on its next runs of this key within a few
-- ms (or gives back). They are granted only while at least half of the burst
-- stays free after them, so a key near its limit (and any key of burst 1)
-- never grants any: it is counted start by start, exactly as without them.
-- Instants are kept in "virtual" time v = now - shift: a push back
-- (RateLimited) adds to `shift`, which moves tat and every reservation later
-- at once, in O(1). Idle keys expire (PEXPIRE): a key nobody uses costs nothing.
-- KEYS[1] state        HASH   tat, real (virtual us), shift (us)
-- KEYS[2] reserved     ZSET   holder -> reserved instant (virtual us)
-- ARGV[1] interval_us      int   one start per interval (per / limit)
-- ARGV[2] tolerance_us     int   (burst - 1) * interval: how far ahead tat may run
-- ARGV[3] mode             str   take | try (no reservation) | refund | push | peek
-- ARGV[4] push_us          int   push: nothing starts on this key before now + push_us
-- ARGV[5] stale_us         int   a reservation unclaimed this long after its instant is dropped
-- ARGV[6] ahead            int   take | try: most starts to grant ahead, with no holder (0 = none)
-- ARGV[7..] holder ids (who starts: a job, prefix/queue/id; in order; none for peek)
-- Returns: {code, wait_us} per holder, then {tokens, reserved, ahead}; code CODE_TAKEN
--          (start now; a reservation that came due is redeemed), CODE_WAIT
--          (reserved: start after wait_us), CODE_DENIED (try: over the rate,
--          nothing reserved; wait_us = when a start is due), CODE_REFUNDED;
--          peek answers CODE_STATE with the wait for a start and no holder;
--          tokens: starts allowed now; reserved: reservations held; ahead:
--          the starts granted ahead
-- Sent again: refund and try never are (ONCE_RATE_MODES): a refund would give each start back
-- twice, a try spend a second start or answer CODE_DENIED. take: a holder the first run
-- reserved answers CODE_WAIT again; one it granted a start is granted a second or reserved one
-- (CODE_WAIT): a start spent twice, and `ahead` starts granted again. push: the pause ends later
-- by at most the time between the runs; holders keep their reservations. peek: reads only.
local CODE_DENIED, CODE_TAKEN, CODE_WAIT, CODE_REFUNDED, CODE_STATE = 0, 1, 2, 3, 4
local state_key, reserved_key = KEYS[1], KEYS[2]
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local mode, push, stale = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local ahead = tonumber(ARGV[6])
local PRUNE_BATCH = 100
local SLACK_US = math.min(interval, 10000)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fields = redis.call('HMGET', state_key, 'tat', 'shift', 'real')
local shift = tonumber(fields[2]) or 0
local v = now - shift
local tat = math.max(tonumber(fields[1]) or v, v)
local real = math.max(tonumber(fields[3]) or v, v)

local function save()
  -- reservations nobody came for (a canceled job) go after stale_us, a few per call
  local old = redis.call('ZRANGEBYSCORE', reserved_key, '-inf', int(v - stale), 'LIMIT', 0,
                         PRUNE_BATCH)
  if #old > 0 then
    redis.call('ZREM', reserved_key, unpack(old))
  end
  redis.call('HSET', state_key, 'tat', int(tat), 'shift', int(shift), 'real', int(real))
  local last = redis.call('ZRANGE', reserved_key, -1, -1, 'WITHSCORES')
  local ttl_ms = math.ceil(math.max(0, tat - v, real - v) / 1000) + 1000
  if #last > 0 then
    ttl_ms = math.max(ttl_ms, math.ceil((tonumber(last[2]) - v + stale) / 1000))
    redis.call('PEXPIRE', reserved_key, ttl_ms)
  end
  redis.call('PEXPIRE', state_key, ttl_ms)
end

-- one holder's start: {code, wait_us}
local function take(holder)
  local mine = redis.call('ZSCORE', reserved_key, holder)
  if mine then
    mine = tonumber(mine)
    if mine > v then
      return CODE_WAIT, mine - v
    end
    if v < real - tolerance - SLACK_US then
      -- due, but claimed late among others: it keeps its place and waits
      -- for room in the starts that really happened
      return CODE_WAIT, real - tolerance - SLACK_US - v
    end
    redis.call('ZREM', reserved_key, holder)
    real = real + interval
    return CODE_TAKEN, 0
  end
  local allowed_at = math.max(tat, real) - tolerance
  if v >= allowed_at then
    tat = tat + interval
    real = real + interval
    return CODE_TAKEN, 0
  end
  if mode == 'try' then
    return CODE_DENIED, allowed_at - v
  end
  redis.call('ZADD', reserved_key, int(allowed_at), holder)
  tat = math.max(tat, real) + interval
  return CODE_WAIT, allowed_at - v
end

if mode == 'push' then
  -- the earliest thing due on this key (its first reservation, else the
  -- next free start) moves to now + push; everything after it moves too
  local first = redis.call('ZRANGE', reserved_key, 0, 0, 'WITHSCORES')
  local earliest = math.max(v, tat - tolerance)
  if #first > 0 then
    earliest = math.min(earliest, tonumber(first[2]))
  end
  local delta = math.max(0, (v + push) - earliest)
  shift = shift + delta
  v = now - shift
  -- after the pause starts come one interval apart (no burst straight into
  -- a provider that just said "too many"); then the pushing runs reserve
  -- their own places, like a take
  tat = math.max(tat, v + push + tolerance)
  real = math.max(real, v + push + tolerance)
end

local reply = {}
if mode == 'peek' then
  reply[#reply + 1] = CODE_STATE
  reply[#reply + 1] = int(math.max(0, math.max(tat, real) - tolerance - v))
end
-- a refund gives back only what no reservation holds: tat never moves back
-- past the last reserved instant (that slot is promised to its holder; a
-- start given back before it would be granted twice)
local booked = v
if mode == 'refund' then
  local last = redis.call('ZRANGE', reserved_key, -1, -1, 'WITHSCORES')
  if #last > 0 then
    booked = tonumber(last[2]) + interval
  end
end
for i = 7, #ARGV do
  local code, wait = CODE_REFUNDED, 0
  if mode == 'refund' then
    -- give back a start this holder took but did not use (another limit made
    -- it wait, or a worker's start granted ahead went unspent)
    tat = math.max(v, booked, tat - interval)
    real = math.max(v, real - interval)
  else
    code, wait = take(ARGV[i])
  end
  reply[#reply + 1] = code
  reply[#reply + 1] = int(math.max(0, wait))
end
local granted = 0
if mode == 'take' or mode == 'try' then
  -- bounded by ahead; each one only while half of the burst stays free after it
  while granted < ahead and math.max(tat, real) + interval - v <= tolerance / 2 do
    tat = tat + interval
    real = real + interval
    granted = granted + 1
  end
end
if mode ~= 'peek' then
  save()
end
reply[#reply + 1] = math.max(0, math.floor((tolerance - (math.max(tat, real) - v)) / interval) + 1)
reply[#reply + 1] = redis.call('ZCARD', reserved_key)
reply[#reply + 1] = granted
return reply
