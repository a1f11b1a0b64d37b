"""The platform review gate: the engine's decisions as review answers, for humans and for CI.

report.build_report(engine, docs)  -> Report (decisions, the five answers, findings, patch)
markdown.render(report)            -> str, for a pull request or a job summary
sarif.render(report)               -> SARIF 2.1.0 log, for code scanning
junit.render(report)               -> JUnit XML, for CI test reports
record.render(report)              -> JSON-ready dict
"""
