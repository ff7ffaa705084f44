-- table.sort: the stock quicksort picks pivots from clock() and time() for large arrays, so
-- the order of equal elements (and anything with an inconsistent comparator) varies.
return function(input)
  local recs = {}
  for i = 1, 500 do recs[i] = { k = (i * 37) % 11, id = i } end
  table.sort(recs, function(x, y) return x.k < y.k end)
  local ids = {}
  for i = 1, 40 do ids[i] = recs[i].id end
  local weird = {}
  for i = 1, 300 do weird[i] = (i * 7919) % 101 end
  table.sort(weird, function(x, y) return (x + y) % 3 == 0 end)  -- inconsistent comparator
  local nums = {}
  for i = 1, 200 do nums[i] = ((i * 31) % 17) + 0.5 * (i % 2) end
  table.sort(nums)
  local strs = { "b", "B", "a", "A", "\xc3\xa9", "z", "Z", "aa", "" }
  table.sort(strs)
  return { ids = ids, weird = table.concat(weird, ","), nums_head = { nums[1], nums[2], nums[200] }, strs = strs }
end
