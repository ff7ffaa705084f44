-- pairs/next order: stock Lua follows the hash layout, which depends on the per-process
-- string hash seed (and on addresses for other keys).
return function(input)
  local t = {}
  for i = 1, 200 do t["key" .. (i * 7919 % 1000)] = i end
  for i = 1, 50 do t[i * 3] = i end
  t[2.5] = "half"; t[-1] = "neg"; t[true] = "yes"; t[false] = "no"
  for i = 1, 200, 3 do t["key" .. (i * 7919 % 1000)] = nil end  -- deletions
  local seen = {}
  for k, v in pairs(t) do seen[#seen + 1] = tostring(k) .. "=" .. tostring(v) end
  print(table.concat(seen, " "))
  local via_next, k = {}, nil
  repeat
    k = next(t, k)
    if k ~= nil then via_next[#via_next + 1] = tostring(k) end
  until k == nil
  print(#via_next, table.concat(via_next, ","):sub(1, 200))
  -- Modifying existing fields during traversal is allowed and does not change the order.
  for k2 in pairs(t) do t[k2] = 0 end
  for k2, v2 in pairs(input) do print("input", k2, v2) end
  return { count = #seen, first = seen[1], last = seen[#seen] }
end
