-- While a Cluster slot is MIGRATING, its node runs a script only when every
-- key the script declares is there at its start, and then refuses it, as
-- "non local key", any key the node does not have: one the script never
-- declared (a hand-off box), and also one the script itself emptied or
-- deleted. A refusal raised by redis.call aborts the script with its
-- earlier writes kept: half-done. So a script writes before it deletes,
-- and touches a key it may have emptied through here.

-- here is redis.call(...), except that a refusal of the key as non local
-- returns false, true: for a declared key that can only be one this script
-- emptied or deleted. Otherwise it returns the reply, false. Any other
-- error is raised as redis.call would. Callers read false as a missing
-- key's answer (nil, 0, an empty array, PTTL -2).
local function here(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'non local key', 1, true) then return false, true end
    error(r)
  end
  return r, false
end

-- try_again is the answer of a script that must write a key here found
-- refused (what names it): the wire sends the call again, as it does when
-- Redis itself answers TRYAGAIN for keys a migration split, until the slot
-- settles. Its callers write nothing before it that a resend would do
-- twice.
local function try_again(what)
  return redis.error_reply('TRYAGAIN the slot is migrating and ' .. what .. ' is not on this node')
end
