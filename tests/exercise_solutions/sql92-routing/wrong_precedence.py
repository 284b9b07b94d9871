# without parentheses AND binds first: VIP test orders get through; and > instead of >= at 100
EU_LARGE = "region = 'EU' AND amount > 100"
AUDIT = "vip = 'yes' OR amount > 10000 AND (test IS NULL OR test <> 'yes')"
REGIONAL = "region IN ('EU', 'UK', 'CH') AND amount BETWEEN 10 AND 500"
