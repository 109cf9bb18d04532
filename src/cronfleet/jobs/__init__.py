"""Built-in job kinds: handlers the scheduler runs like any other."""

from cronfleet.jobs.http import HttpJob, HttpJobFailed, HttpRuntime, RetryPolicy, UnsafeTarget

__all__ = ["HttpJob", "HttpJobFailed", "HttpRuntime", "RetryPolicy", "UnsafeTarget"]
