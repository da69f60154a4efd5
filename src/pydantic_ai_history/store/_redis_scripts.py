"""The Lua scripts `RedisStore` runs: each one round trip, atomic on the server.

Besides each artifact's bytes (`KEYS[1]`) and info (`KEYS[2]`) and a byte count per scope, a store keeps
an index (data keys by write time, `prefix + ':index'`), each one's size and scope counter (`prefix +
':sizes'`) and their total (`prefix + ':total'`), so it can delete the oldest to stay within `max_bytes`
and take expired artifacts out of every count. Every key lives under the prefix (hash-tag it on a cluster).
"""

from __future__ import annotations

# `forget` takes one artifact out of the store and every count; `make_room` deletes what expired, then the
# oldest while the total plus `extra` is over `max_bytes`, at most `budget` artifacts per call. Puts pass no
# `max_bytes` (they refuse rather than delete what is within its ttl); only an explicit prune does.
_FORGET = """
local function forget(member)
  local entry = redis.call('HGET', KEYS_INDEX[2], member)
  redis.call('ZREM', KEYS_INDEX[1], member)
  redis.call('DEL', member, member .. ':info')
  if not entry then return 0 end
  redis.call('HDEL', KEYS_INDEX[2], member)
  local sep = string.find(entry, '|', 1, true)
  local size = tonumber(string.sub(entry, 1, sep - 1))
  local counter = string.sub(entry, sep + 1)
  redis.call('DECRBY', KEYS_INDEX[3], size)
  if redis.call('EXISTS', counter) == 1 then redis.call('DECRBY', counter, size) end
  return size
end

local function make_room(now, max_age, max_bytes, extra, budget)
  local removed, freed = 0, 0
  if max_age ~= '' then
    local before = now - tonumber(max_age)
    local old = redis.call('ZRANGEBYSCORE', KEYS_INDEX[1], '-inf', before, 'LIMIT', 0, budget)
    for _, member in ipairs(old) do
      freed = freed + forget(member)
      removed = removed + 1
    end
  end
  if max_bytes ~= '' then
    local limit = tonumber(max_bytes)
    while removed < budget and tonumber(redis.call('GET', KEYS_INDEX[3]) or '0') + extra > limit do
      local oldest = redis.call('ZRANGE', KEYS_INDEX[1], 0, 0)
      if #oldest == 0 then break end
      freed = freed + forget(oldest[1])
      removed = removed + 1
    end
  end
  return removed, freed
end
"""

PUT_SCRIPT = (
    """
local KEYS_INDEX = {KEYS[4], KEYS[5], KEYS[6]}
"""
    + _FORGET
    + """
local existing = redis.call('GET', KEYS[2])
if existing then return existing end
local size = tonumber(ARGV[4])
if ARGV[5] ~= '' and tonumber(redis.call('GET', KEYS[3]) or '0') + size > tonumber(ARGV[5]) then
  return 0
end
local now = tonumber(ARGV[6])
make_room(now, ARGV[3], '', size, 1024)
local total = tonumber(redis.call('GET', KEYS[6]) or '0')
if ARGV[7] ~= '' and total + size > tonumber(ARGV[7]) then
  return {-1, total}
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('INCRBY', KEYS[3], size)
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('INCRBY', KEYS[3], size)
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
redis.call('ZADD', KEYS[4], now, KEYS[1])
redis.call('HSET', KEYS[5], KEYS[1], size .. '|' .. KEYS[3])
redis.call('INCRBY', KEYS[6], size)
return 1
"""
)
"""KEYS: data, info, scope counter, index, sizes, total. ARGV: data, info, ttl (ms or ''), size, scope
budget (or ''), now (ms), max bytes (or ''). An existing artifact is kept (its info returned); a scope over
its budget is refused (0); otherwise the expired are taken out of the index, and a put that would still take
the prefix past `max_bytes` is refused (`{-1, bytes held}`): nothing within its `ttl` is deleted to make room.
Else the bytes, the info and every count are written together, so no process sees info without bytes (1)."""

PRUNE_SCRIPT = (
    """
local KEYS_INDEX = {KEYS[1], KEYS[2], KEYS[3]}
"""
    + _FORGET
    + """
local removed, freed = make_room(tonumber(ARGV[1]), ARGV[2], ARGV[3], 0, tonumber(ARGV[4]))
return {removed, freed, redis.call('ZCARD', KEYS[1]), tonumber(redis.call('GET', KEYS[3]) or '0')}
"""
)
"""KEYS: index, sizes, total. ARGV: now (ms), max age (ms or ''), max bytes (or ''), most to delete in this
call. Returns `[removed, freed bytes, artifacts held, bytes held]`."""
