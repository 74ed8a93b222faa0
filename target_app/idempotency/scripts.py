"""The Lua scripts behind RedisStore: `begin` and `finish` are one script each, so
each is one atomic step and one round trip. The argument layout of each script is
documented above it; redis_store.py is their only caller.
"""

from __future__ import annotations

# KEYS[1] the record (hash: state, fp, token[, status, headers, body])
# KEYS[2] the counters hash
# ARGV[1] request fingerprint
# ARGV[2] fresh random token for this request
# ARGV[3] in-flight lease in milliseconds
# ARGV[4] "" (the lease is the record's Redis expiry, on Redis's clock), or the app's
#         wall clock in milliseconds: the `lease-wall-clock` negative control
# Returns {"started"} | {"mismatch"} | {"in_flight", ms left} | {"replay", status, headers, body}
BEGIN_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'headers', 'body', 'until')
local app_now = tonumber(ARGV[4])
-- The `lease-wall-clock` control: the lease ends when the app's clock passes the
-- deadline the claim stored, whatever Redis's clock says.
if app_now and rec[1] == 'inflight' and tonumber(rec[6]) <= app_now then
  rec[1] = false
end
if not rec[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[1], 'token', ARGV[2])
  if app_now then
    redis.call('HSET', KEYS[1], 'until', app_now + tonumber(ARGV[3]))
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {'started'}
end
if rec[2] ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[2], 'api_fingerprint_conflicts', 1)
  return {'mismatch'}
end
if rec[1] == 'inflight' then
  redis.call('HINCRBY', KEYS[2], 'api_inflight_conflicts', 1)
  if app_now then
    return {'in_flight', tonumber(rec[6]) - app_now}
  end
  return {'in_flight', redis.call('PTTL', KEYS[1])}
end
redis.call('HINCRBY', KEYS[2], 'api_replays', 1)
return {'replay', rec[3], rec[4], rec[5]}
"""

# KEYS[1] the record
# ARGV[1] the token `begin` handed out
# ARGV[2] response status
# ARGV[3] response headers (JSON list of [name, value])
# ARGV[4] response body
# ARGV[5] TTL of the finished record in milliseconds
# ARGV[6] "1" store the response, "0" release the key (a 5xx is never stored)
# Returns 1 when the token owned the record, 0 otherwise (lease expired, taken over)
FINISH_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'token')
if rec[1] ~= 'inflight' or rec[2] ~= ARGV[1] then
  return 0
end
if ARGV[6] == '0' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
redis.call('HDEL', KEYS[1], 'token', 'until')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""
