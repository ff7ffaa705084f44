-- Invoice totals per currency from a batch of e-mails.
--
-- Input:  { mails = { "<e-mail text>", ... } }
-- Output: { totals = { EUR = "1234.50", ... }, invoices = { "INV-2024-0001", ... },
--           invoice_count = n, mails_without_invoice = n, unpriced = { "INV-...", ... } }
--
-- An invoice counts once however many mails mention it (reminders repeat the number and the
-- amount). Amounts are summed in integer cents, so totals are exact and independent of order.
local bp = rote.blueprint { name = "invoice_totals", version = "1.0.0" }

local invoice_number = bp:regex {
  name = "invoice_number",
  task = "Find invoice numbers: INV, a dash, a four-digit year, a dash and four digits "
      .. "(INV-2024-0001). Not when glued to other letters or digits.",
  examples = {
    { "Please pay INV-2024-0001 by Friday.", { "INV-2024-0001" } },
    { "Ref INV-2023-0420 and INV-2024-0007", { "INV-2023-0420", "INV-2024-0007" } },
    { "XINV-2024-0001 and INV-24-1 are not invoice numbers", {} },
    { "nothing to see", {} },
  },
}

local money = bp:regex {
  name = "money",
  task = "Find amounts of money: a currency symbol ($, €, £) or ISO code (EUR, USD, GBP, CHF) "
      .. "before or after a number that may use ',' or '.' as thousands or decimal separators.",
  examples = {
    { "Total due: $1,234.50 (net 30)", { "$1,234.50" } },
    { "Betrag: 1.234,50 EUR, Skonto 2%", { "1.234,50 EUR" } },
    { "£99 or CHF 12", { "£99", "CHF 12" } },
    { "no money here, 42 apples", {} },
  },
}

local parse_amount = bp:lua {
  name = "parse_amount",
  task = "Parse an amount of money into an ISO currency code and an integer number of cents. "
      .. "The symbols $, €, £ mean USD, EUR, GBP. The last '.' or ',' followed by exactly two "
      .. "digits is the decimal separator; every other '.', ',' or space groups thousands.",
  signature = "function(text) -> { currency = string, cents = integer }",
  tests = {
    { "$1,234.50", { currency = "USD", cents = 123450 } },
    { "1.234,50 EUR", { currency = "EUR", cents = 123450 } },
    { "£99", { currency = "GBP", cents = 9900 } },
    { "CHF 12", { currency = "CHF", cents = 1200 } },
    { "€ 1 000,05", { currency = "EUR", cents = 100005 } },
  },
}

-- The line of a mail that states what is owed: the first line mentioning a total or an amount
-- due, else the whole mail.
local function total_line(mail)
  for line in string.gmatch(mail, "[^\n]+") do
    local lower = string.lower(line)
    if string.find(lower, "total", 1, true) or string.find(lower, "due", 1, true)
        or string.find(lower, "betrag", 1, true) or string.find(lower, "montant", 1, true) then
      return line
    end
  end
  return mail
end

local function format_cents(cents)
  local sign = cents < 0 and "-" or ""
  cents = math.abs(cents)
  return string.format("%s%d.%02d", sign, cents // 100, cents % 100)
end

function bp.run(input)
  local mails = input.mails or {}
  local numbers_per_mail = invoice_number:find_all_each(mails)
  local total_lines = {}
  for i, mail in ipairs(mails) do total_lines[i] = total_line(mail) end
  local amounts_per_mail = money:find_all_each(total_lines)

  -- First mention of each invoice wins; its amount is the first amount on the total line.
  local seen, order, amount_text = {}, {}, {}
  local without = 0
  for i, numbers in ipairs(numbers_per_mail) do
    if #numbers == 0 then
      without = without + 1
    else
      local first_amount = amounts_per_mail[i][1]
      for j, number in ipairs(numbers) do
        if not seen[number] then
          seen[number] = true
          order[#order + 1] = number
          -- One amount per mail: it belongs to the first invoice the mail names.
          if first_amount and j == 1 then amount_text[number] = first_amount end
        end
      end
    end
  end

  local to_parse, parsed_for = {}, {}
  for _, number in ipairs(order) do
    if amount_text[number] then
      to_parse[#to_parse + 1] = amount_text[number]
      parsed_for[#to_parse] = number
    end
  end
  local parsed = #to_parse > 0 and parse_amount:map(to_parse) or {}

  local cents, priced = {}, {}
  for i, amount in ipairs(parsed) do
    cents[amount.currency] = (cents[amount.currency] or 0) + amount.cents
    priced[parsed_for[i]] = true
  end
  local totals, unpriced = {}, {}
  for currency, c in pairs(cents) do totals[currency] = format_cents(c) end
  for _, number in ipairs(order) do
    if not priced[number] then unpriced[#unpriced + 1] = number end
  end
  table.sort(order)
  rote.log(#mails, "mails,", #order, "invoices,", #unpriced, "without an amount")
  return {
    totals = totals,
    invoices = order,
    invoice_count = #order,
    mails_without_invoice = without,
    unpriced = unpriced,
  }
end

return bp
