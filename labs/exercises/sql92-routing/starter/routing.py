"""Exercise sql92-routing: write one SQL92 filter expression per rule (see task.md).

Every order message carries user properties: region ('EU', 'US', 'UK', 'CH', ...), amount (a
number), and sometimes vip ('yes' or 'no') and test ('yes' on test orders; most orders have no
test property at all)."""

# 1. Orders from region EU of at least 100.
EU_LARGE = ""

# 2. The audit team wants every VIP order (vip = 'yes') and every order over 10000, but never a
#    test order.
AUDIT = ""

# 3. The European desk takes orders from EU, UK and CH with an amount from 10 to 500, both ends
#    included.
REGIONAL = ""
