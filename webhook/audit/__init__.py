"""Cluster audit: decide what already runs with the admission engine, and report it.

scan            paginated LISTs of every supported kind (plus pods no workload owns), through a lister
decide          one stored object -> ObjectAudit: validations on the stored object, mutations as
                "would patch", exceptions honoured; the engine is reached only through webhook.engine
compare         two audits of the same objects (current and proposed policy set): what changes
render          table / json / markdown / sarif for `trainguard audit`
report_objects  ObjectAudits -> wgpolicyk8s.io PolicyReports or openreports.io Reports, split by size
report_loop     the loop of `serve --audit`: re-decide what changed, write what differs, leader only
cluster         LISTs, watches and report writes: with cluster_serve (the watches, Reporter and Lease
                of `serve --audit`), the only modules here that use the kubernetes client
"""
