-- math.random is seeded from the clock and an address in stock Lua.
return function(input)
  local xs = {}
  for i = 1, 10 do xs[#xs + 1] = math.random(1, 1000000) end
  local f = math.random()
  math.randomseed(input.seed)
  local ys = {}
  for i = 1, 5 do ys[#ys + 1] = math.random(0) end
  return { xs = xs, f = f, ys = ys }
end
