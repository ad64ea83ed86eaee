"""Times to the second, with their zone: runs, changes and regenerations are told apart
by seconds, and the API and the documents say `Z` where the admin would say nothing.

Django's English formats stop at the minute ("Jan. 2, 2026, 3:04 a.m.").
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
TIME_FORMAT = "H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
