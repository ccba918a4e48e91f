"""Schema names of the evidence this package writes: one record per rank, inside a report.

A reader checks ``schema`` before trusting any other field; a change to the meaning of a
field gets a new version."""

EVIDENCE_SCHEMA = "sparkflake.distribution-evidence/v1"
REPORT_SCHEMA = "sparkflake.distribution-report/v1"
