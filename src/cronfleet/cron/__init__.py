"""Time: cron grammar, next/prev fire times, DST rules, intervals, descriptions."""
