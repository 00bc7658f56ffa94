-- Swap a rebuilt mirror in, atomically: readers see the old set or the new one, never a
-- half-built one, and never a new set without its meta.
-- KEYS[1] the rebuilt set (may not exist: an empty window), KEYS[2] the lane's live set,
-- KEYS[3] its meta hash (one hash slot).
-- ARGV[1] Redis run id, ARGV[2] Postgres system identifier, ARGV[3] window end (epoch ms),
-- ARGV[4] now (epoch ms). Returns the new epoch.
if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('RENAME', KEYS[1], KEYS[2])
else
    redis.call('DEL', KEYS[2])
end
local epoch = redis.call('HINCRBY', KEYS[3], 'epoch', 1)
redis.call('HSET', KEYS[3], 'run_id', ARGV[1], 'system_id', ARGV[2], 'window_until', ARGV[3],
    'mirrored_at', ARGV[4], 'rebuilt_at', ARGV[4])
return epoch
