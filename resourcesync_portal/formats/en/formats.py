"""Times to the second: runs, changes and regenerations are told apart by seconds.

Django's English formats stop at the minute ("Jan. 2, 2026, 3:04 a.m.").
"""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
