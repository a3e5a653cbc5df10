"""The contract: typed values of CONTRACTS §3–§7, no I/O.

The request and the frozen previous turn, the tool Envelope, the DiagnosisDraft and its one
strict gate, the observations, the Execution Result, the strict JSON-Schema subset, the prompt
files (read by name from the bundled resources) and the plain-text rendering of a result.
"""
