"""Evidence adapters: the three tools the diagnosis agent may call, behind one protocol."""

from sre_diag.tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    EvidenceAdapter,
    Failed,
    ProbeReport,
    ProbeStatus,
    ProbingAdapter,
    Ready,
    ToolName,
)
from sre_diag.tools.schemas import (
    KnowledgeInput,
    KnowledgeItem,
    LogItem,
    LogLevel,
    LogsInput,
    MysqlInput,
    MysqlRow,
)

__all__ = [
    "AdapterCall",
    "AdapterErrorCode",
    "AdapterResult",
    "EvidenceAdapter",
    "Failed",
    "KnowledgeInput",
    "KnowledgeItem",
    "LogItem",
    "LogLevel",
    "LogsInput",
    "MysqlInput",
    "MysqlRow",
    "ProbeReport",
    "ProbeStatus",
    "ProbingAdapter",
    "Ready",
    "ToolName",
]
