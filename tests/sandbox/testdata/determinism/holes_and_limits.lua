-- '#' on tables with holes, and limits: the same work must hit the same limit at the same
-- instruction count in every process.
return function(input)
  local t = {}
  for i = 1, 100 do t[i] = i end
  for i = 1, 100, 7 do t[i] = nil end
  local u = { 1, 2, 3, nil, 5, nil, nil, 8 }
  local w = {}
  for i = 1, 64 do w[i] = i; w["s" .. i] = i end
  for i = 10, 64, 3 do w[i] = nil; w["s" .. i] = nil end
  for i = 1, 20 do w["n" .. i] = i end
  print(#t, #u, #w)
  if input.mode == "memory" then
    local acc = {}
    for i = 1, 1e9 do acc[i] = ("x"):rep(i % 100) .. i end
  elseif input.mode == "instructions" then
    local n = 0
    while true do n = n + 1 end
  end
  return { t = #t, u = #u }
end
