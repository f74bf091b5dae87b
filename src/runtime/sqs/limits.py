"""What SQS allows, in one place: every other module of the package checks
against these names instead of repeating a number from the SQS docs."""

from __future__ import annotations

import re

SQS_MAX_DELAY_SECONDS = 900
"""SendMessage's DelaySeconds cap: 15 minutes."""
SQS_MAX_VISIBILITY_SECONDS = 43_200
"""A message's visibility cannot reach past 12 hours from its receive."""
SQS_MAX_MESSAGE_BYTES = 1_048_576
"""SQS's message size limit since August 2025 (it was 256 KiB before); a queue's
MaximumMessageSize attribute may set it lower. :meth:`SqsQueue.create_queues`
sets it to this."""
SQS_MAX_BATCH = 10
"""Entries per ReceiveMessage, SendMessageBatch and DeleteMessageBatch."""
SQS_MAX_WAIT_SECONDS = 20
"""Longest long poll SQS allows."""
DEFAULT_MAX_RECEIVE_COUNT = 100
"""The redrive policy's maxReceiveCount: a safety net only. The worker
dead-letters a job itself once its attempts run out (so the workflow layer
writes a failed outcome), and a run's lapsed leases (each a receive of one
message) fail it long before this (``DEFAULT_MAX_LAPSES``); SQS's redrive
catches only a message received this many times without ever being
settled or re-sent."""
RETENTION_SECONDS = 1_209_600
"""14 days, SQS's maximum, set on every queue :meth:`SqsQueue.create_queues` makes."""
VISIBILITY_SAFETY = 60.0
"""Seconds kept clear of the 12-hour visibility ceiling when renewing a
lease (moto measures it from the send, AWS from the receive; both are
covered)."""
NAME = re.compile(r"^[A-Za-z0-9_-]{1,70}$")
"""A base name or a tier suffix: SQS queue names are letters, digits, '-' and
'_', and ``<name>-<suffix>`` has to stay a queue name."""
