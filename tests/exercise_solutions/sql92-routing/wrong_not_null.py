# NOT (test = 'yes') is unknown, not true, on orders without a test property
EU_LARGE = "region = 'EU' AND amount >= 100"
AUDIT = "(vip = 'yes' OR amount > 10000) AND NOT (test = 'yes')"
REGIONAL = "region IN ('EU', 'UK', 'CH') AND amount BETWEEN 10 AND 500"
