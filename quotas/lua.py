"""The Lua scripts of the Redis quota store: one atomic script per operation.

Mirrors `quotas.memory` step for step. `now` comes in ARGV; Redis' own clock (`TIME`) only
bounds it, so one process whose clock runs ahead cannot move a tenant's clock into the future for
every other process (one process has one clock: the memory store needs no bound). TTLs only
collect garbage (decisions use the stored logical times). Keys of one tenant share a `{tenant}`
hash tag, so a cluster keeps them in one slot. A limit of -1 means "no limit".
"""

from __future__ import annotations

# How far a caller's clock may run ahead of the Redis server's before it is not believed.
MAX_CLOCK_LEAD_MS = 1_000

# The tenant clock: the highest time any caller sent (so it never goes back), but never past
# Redis' clock plus the lead, a stored one included (written by a skewed process before).
_CLOCK = (
    """
local function clock_to(meta, now)
  local t = redis.call('TIME')
  local limit = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + """
    + str(MAX_CLOCK_LEAD_MS)
    + """
  if now > limit then now = limit end
  local clock = tonumber(redis.call('HGET', meta, 'clock') or '0')
  if clock > limit then clock = limit end
  if clock > now then now = clock end
  redis.call('HSET', meta, 'clock', string.format('%d', now))
  return now
end
"""
)

# One more call on a session's count; a count that starts from 0 starts a new run at `now`
# (`since`), so a settle of a call from an earlier run never takes one of this run's back. The
# tenant's sessions are indexed by expiry (`index`): past `max_sessions` live ones, those that
# would expire soonest are forgotten, so fresh session ids cannot fill Redis for everyone.
_COUNT_CALL = """
local function count_call(sess, index, calls, now, ttl, gc_ms, max_sessions)
  local expiry = string.format('%d', now + ttl)
  redis.call('HSET', sess, 'calls', string.format('%d', calls + 1), 'expiry', expiry)
  redis.call('PEXPIRE', sess, gc_ms)
  redis.call('ZADD', index, expiry, sess)
  redis.call('PEXPIRE', index, gc_ms)
  if calls > 0 then return end
  redis.call('HSET', sess, 'since', string.format('%d', now))
  redis.call('ZREMRANGEBYSCORE', index, '-inf', string.format('%d', now))
  local over = redis.call('ZCARD', index) - max_sessions
  if over > 0 then
    local gone = redis.call('ZPOPMIN', index, over)
    for i = 1, #gone, 2 do redis.call('DEL', gone[i]) end
  end
end
"""

# KEYS: 1 meta (clock, tok), 2 win (zset id -> admitted ms), 3 wtok (hash id -> counted tokens),
# 4 active (zset id -> lease expiry ms), 5 res (hash id -> record), 6 budget (hash), 7 session,
# 8 sessions (zset session key -> expiry ms).
_PRELUDE = (
    _CLOCK
    + """
local meta, win, wtok, active, res, budget = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local function int(x) return string.format('%d', x) end
local function num(x) if x then return tonumber(x) end return 0 end

local function parse(rec)
  local tokens, cost, period, state = string.match(rec, '^(%d+)|(%d+)|([^|]*)|(%a+)$')
  return tonumber(tokens), tonumber(cost), period, state
end

local function pack(tokens, cost, period, state)
  return int(tokens) .. '|' .. int(cost) .. '|' .. period .. '|' .. state
end

local function touch(gc_ms)
  for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], gc_ms) end
end

-- the tenant clock never goes back; drop window entries; expire leases (charge their hold)
local function advance(now, window)
  now = clock_to(meta, now)
  local cutoff = int(now - window)
  local old = redis.call('ZRANGEBYSCORE', win, '-inf', cutoff)
  if #old > 0 then
    local freed = 0
    for _, id in ipairs(old) do
      freed = freed + num(redis.call('HGET', wtok, id))
      redis.call('HDEL', wtok, id)
      if not redis.call('ZSCORE', active, id) then redis.call('HDEL', res, id) end
    end
    redis.call('ZREMRANGEBYSCORE', win, '-inf', cutoff)
    redis.call('HINCRBY', meta, 'tok', int(-freed))
  end
  local dead = redis.call('ZRANGEBYSCORE', active, '-inf', int(now))
  for _, id in ipairs(dead) do
    local rec = redis.call('HGET', res, id)
    if rec then
      local tokens, cost, period = parse(rec)
      redis.call('HINCRBY', budget, 'held:' .. period, int(-cost))
      redis.call('HINCRBY', budget, 'spend:' .. period, int(cost))
      if redis.call('ZSCORE', win, id) then
        redis.call('HSET', res, id, pack(tokens, cost, period, 'expired'))
      else
        redis.call('HDEL', res, id)
      end
    end
  end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', active, '-inf', int(now)) end
  return now
end

local function window_use(now, window)
  local tok = num(redis.call('HGET', meta, 'tok'))
  local count = redis.call('ZCARD', win)
  local reset = 0
  if count > 0 then
    local newest = redis.call('ZRANGE', win, -1, -1, 'WITHSCORES')
    reset = tonumber(newest[2]) + window - now
  end
  return tok, count, reset
end

local function session_calls(sess, now)
  local state = redis.call('HMGET', sess, 'calls', 'expiry')
  local expiry = num(state[2])
  if expiry > now then return num(state[1]), expiry end
  return 0, expiry
end
"""
    + _COUNT_CALL
)

# ARGV: id, now, tokens, cost, period, period_end, window, lease, tpm, rpm, conc, cps, budget,
#       session_ttl, has_session, gc_ms, session_gc_ms, concurrency_retry_ms, needs_seed
#       ('1': a budget is checked only once `SEED_SPEND` marked the period `seeded`),
#       max_sessions
RESERVE = (
    _PRELUDE
    + """
local id = ARGV[1]
local tokens, cost, period = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local period_end, window, lease = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local tpm, rpm, conc = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local cps, cap, session_ttl = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local has_session = ARGV[15] == '1' and cps >= 0
local gc_ms, session_gc_ms, conc_retry = ARGV[16], ARGV[17], tonumber(ARGV[18])
local sess = KEYS[7]

local now = advance(tonumber(ARGV[2]), window)
if redis.call('HEXISTS', res, id) == 1 then return {'dup'} end
if cap >= 0 and ARGV[19] == '1' and redis.call('HEXISTS', budget, 'seeded:' .. period) == 0 then
  return {'unseeded'}  -- the budget hash lost its data (or the month is new): nothing held
end
local tok, count = window_use(now, window)

local best = nil
local function consider(name, value, current, retry)
  if best == nil or retry > best[5] then best = {'over', name, value, current, retry} end
end

if tpm >= 0 and tok + tokens > tpm then
  local need = tok + tokens - tpm
  local entries = redis.call('ZRANGE', win, 0, -1, 'WITHSCORES')
  local freed, retry = 0, 0
  for i = 1, #entries, 2 do
    freed = freed + num(redis.call('HGET', wtok, entries[i]))
    if freed >= need then retry = tonumber(entries[i + 1]) + window - now break end
  end
  consider('tokens_per_minute', tpm, tok, retry)
end
if rpm >= 0 and count + 1 > rpm then
  local need = count + 1 - rpm
  local entry = redis.call('ZRANGE', win, need - 1, need - 1, 'WITHSCORES')
  consider('requests_per_minute', rpm, count, tonumber(entry[2]) + window - now)
end
local live = redis.call('ZCARD', active)
if conc >= 0 and live + 1 > conc then
  consider('concurrent_requests', conc, live, conc_retry)
end
local calls = 0
if has_session then
  local expiry
  calls, expiry = session_calls(sess, now)
  if calls + 1 > cps then consider('calls_per_session', cps, calls, expiry - now) end
end
if cap >= 0 then
  local current = num(redis.call('HGET', budget, 'spend:' .. period))
    + num(redis.call('HGET', budget, 'held:' .. period))
  if current + cost > cap then consider('monthly_budget_usd', cap, current, period_end - now) end
end
if best then
  touch(gc_ms)
  local t, c, r = window_use(now, window)
  table.insert(best, t) table.insert(best, c) table.insert(best, r)
  return best
end

redis.call('ZADD', win, int(now), id)
redis.call('HSET', wtok, id, int(tokens))
redis.call('HINCRBY', meta, 'tok', int(tokens))
redis.call('ZADD', active, int(now + lease), id)
redis.call('HSET', res, id, pack(tokens, cost, period, 'active'))
redis.call('HINCRBY', budget, 'held:' .. period, int(cost))
if has_session then
  count_call(sess, KEYS[8], calls, now, session_ttl, session_gc_ms, tonumber(ARGV[20]))
end
touch(gc_ms)
return {'ok', now, tok + tokens, count + 1, window}
"""
)

# KEYS: as RESERVE's. ARGV: id, actual_tokens, actual_cost, period, admitted ms ('' when the
#       call is on no session's count)
SETTLE = (
    _PRELUDE
    + """
local id, actual_tokens, actual_cost = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local rec = redis.call('HGET', res, id)
if not rec then return {'unknown', 0, num(redis.call('HGET', budget, 'spend:' .. ARGV[4]))} end
local tokens, cost, period, state = parse(rec)
local spend_key = 'spend:' .. period
if state == 'settled' then return {'duplicate', 0, num(redis.call('HGET', budget, spend_key))} end
if actual_tokens == 0 and actual_cost == 0 and ARGV[5] ~= '' then
  -- nothing used: take the call back off its session's count, if it is in the current run
  local sess = redis.call('HMGET', KEYS[7], 'calls', 'since')
  local calls = num(sess[1])
  if calls > 0 and num(sess[2]) <= tonumber(ARGV[5]) then
    redis.call('HSET', KEYS[7], 'calls', int(calls - 1))
  end
end
local status = 'settled'
if redis.call('ZREM', active, id) == 1 then
  redis.call('HINCRBY', budget, 'held:' .. period, int(-cost))
  redis.call('HINCRBY', budget, spend_key, int(actual_cost))
else
  status = 'late'
  redis.call('HINCRBY', budget, spend_key, int(actual_cost - cost))
end
if redis.call('ZSCORE', win, id) then
  local counted = num(redis.call('HGET', wtok, id))
  redis.call('HINCRBY', meta, 'tok', int(actual_tokens - counted))
  redis.call('HSET', wtok, id, int(actual_tokens))
  redis.call('HSET', res, id, pack(tokens, cost, period, 'settled'))
else
  redis.call('HDEL', res, id)
end
-- no TTL refresh: settle creates no key (the reserve that made them set their TTL)
local overrun = actual_tokens - tokens
if overrun < 0 then overrun = 0 end
return {status, overrun, num(redis.call('HGET', budget, spend_key))}
"""
)

# ARGV: now, window, period, has_session, gc_ms
USAGE = (
    _PRELUDE
    + """
local window = tonumber(ARGV[2])
local now = advance(tonumber(ARGV[1]), window)
touch(ARGV[5])
local tok, count, reset = window_use(now, window)
local calls = 0
if ARGV[4] == '1' then calls = session_calls(KEYS[7], now) end
return {now, tok, count, redis.call('ZCARD', active), reset,
        num(redis.call('HGET', budget, 'spend:' .. ARGV[3])),
        num(redis.call('HGET', budget, 'held:' .. ARGV[3])), calls}
"""
)

# KEYS: 1 budget. ARGV: period, spend_micro_usd, gc_ms
SEED_SPEND = """
local key = 'spend:' .. ARGV[1]
local current = tonumber(redis.call('HGET', KEYS[1], key) or '0')
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], key, ARGV[2]) end
redis.call('HSET', KEYS[1], 'seeded:' .. ARGV[1], '1')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: 1 meta (clock), 2 tool window (zset id -> admitted ms), 3 tool leases (zset id -> expiry
#       ms), 4 session (the hash model calls count on), 5 sessions (as RESERVE's 8).
# ARGV: id, now, window, lease, per_minute, concurrent, cps, session_ttl, has_session, gc_ms,
#       session_gc_ms, concurrency_retry_ms, max_sessions
TOOL_ADMIT = (
    _CLOCK
    + _COUNT_CALL
    + """
local meta, twin, tact, sess = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function int(x) return string.format('%d', x) end
local id, now = ARGV[1], tonumber(ARGV[2])
local window, lease = tonumber(ARGV[3]), tonumber(ARGV[4])
local per_minute, conc, cps = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local session_ttl, has_session = tonumber(ARGV[8]), ARGV[9] == '1' and tonumber(ARGV[7]) >= 0
local gc_ms, session_gc_ms, conc_retry = ARGV[10], ARGV[11], tonumber(ARGV[12])

now = clock_to(meta, now)
redis.call('ZREMRANGEBYSCORE', twin, '-inf', int(now - window))
redis.call('ZREMRANGEBYSCORE', tact, '-inf', int(now))

local best = nil
local function consider(name, value, current, retry)
  if best == nil or retry > best[5] then best = {'over', name, value, current, retry} end
end
local running = redis.call('ZCARD', tact)
if conc >= 0 and running + 1 > conc then
  consider('concurrent_tool_calls', conc, running, conc_retry)
end
local started = redis.call('ZCARD', twin)
if per_minute >= 0 and started + 1 > per_minute then
  local entry = redis.call('ZRANGE', twin, started - per_minute, started - per_minute, 'WITHSCORES')
  consider('tool_calls_per_minute', per_minute, started, tonumber(entry[2]) + window - now)
end
local calls = 0
if has_session then
  local state = redis.call('HMGET', sess, 'calls', 'expiry')
  local expiry = tonumber(state[2] or '0')
  if expiry > now then calls = tonumber(state[1] or '0') end
  if calls + 1 > cps then consider('calls_per_session', cps, calls, expiry - now) end
end
if best == nil then
  redis.call('ZADD', twin, int(now), id)
  redis.call('ZADD', tact, int(now + lease), id)
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], gc_ms) end
if best then return best end
if has_session then
  count_call(sess, KEYS[5], calls, now, session_ttl, session_gc_ms, tonumber(ARGV[13]))
end
return {'ok', now}
"""
)
