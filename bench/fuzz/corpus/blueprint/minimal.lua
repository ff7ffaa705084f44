local bp = rote.blueprint { name = "m", version = "1" }
local re = bp:regex { name = "digits", task = "digits", examples = { { "a 12 b", { "12" } }, { "none", {} } } }
local f = bp:lua { name = "double", task = "double it", signature = "function(n) -> number", tests = { { 2, 4 }, { { a = 1.5 }, { 3.0 } } } }
function bp.run(input) return { re:find_all(input.text), f(input.n) } end
return bp
