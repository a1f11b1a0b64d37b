{{/*
Every object is named "trainguard", as in the kustomize base: the server registers webhook
configurations of that name, for the Service and service account of that name, so one release per
cluster (the configurations are cluster-scoped anyway).
*/}}

{{- define "trainguard.labels" -}}
app.kubernetes.io/name: trainguard
{{ include "trainguard.baseLabels" . }}
{{- end -}}

{{/* The labels of the generated ConfigMaps in the kustomize base: no app.kubernetes.io/name. */}}
{{- define "trainguard.baseLabels" -}}
app.kubernetes.io/part-of: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "trainguard.selectorLabels" -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "trainguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "trainguard.policiesConfigMap" -}}
{{ .Values.policies.existingConfigMap | default "trainguard-policies" }}
{{- end -}}

{{/* The PlatformConfig document: the values, with apiVersion, kind and the excluded namespaces. */}}
{{- define "trainguard.platformConfig" -}}
{{- $config := deepCopy .Values.platformConfig -}}
{{- $excluded := concat (get $config "excludedNamespaces" | default list) .Values.excludedNamespaces | uniq -}}
{{- if $excluded }}{{ $_ := set $config "excludedNamespaces" $excluded }}{{ end -}}
{{- $_ := unset $config "apiVersion" -}}
{{- $_ := unset $config "kind" -}}
apiVersion: trainguard.dev/v1alpha1
kind: PlatformConfig
{{- with $config }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Non-empty when the server writes the Secret's ca.crt into the caBundle of the two webhook
configurations the chart creates (`serve --inject-ca-bundle`, RBAC get/patch on those names):
without self-registration, unless cert-manager's cainjector or certificates.caBundle provides it.
*/}}
{{- define "trainguard.injectCABundle" -}}
{{- if and (not .Values.webhook.selfRegister) (ne .Values.certificates.source "certManager") (not .Values.certificates.caBundle) -}}
true
{{- end -}}
{{- end -}}

{{/* Where the server finds the CA of the API server's client certificate (mtls.enabled). */}}
{{- define "trainguard.clientCAPath" -}}
{{- if .Values.mtls.clientCASecret -}}
/client-ca/{{ .Values.mtls.clientCAKey }}
{{- else -}}
/certs/ca.crt
{{- end -}}
{{- end -}}

{{/* The webhook configurations register failurePolicy Fail/Ignore and 5 s when the server registers. */}}
{{- define "trainguard.checkValues" -}}
{{- $w := .Values.webhook -}}
{{- if and $w.selfRegister (or (ne $w.validating.failurePolicy "Fail") (ne $w.mutating.failurePolicy "Ignore") (ne (int $w.timeoutSeconds) 5)) -}}
{{- fail "webhook.validating.failurePolicy, webhook.mutating.failurePolicy and webhook.timeoutSeconds other than Fail, Ignore and 5 need webhook.selfRegister=false: the server registers those values when it registers itself" -}}
{{- end -}}
{{- if and .Values.certificates.caBundle (eq .Values.certificates.source "generate") -}}
{{- fail "certificates.caBundle cannot be known for certificates.source=generate (the Job makes a new CA): use source secret or certManager" -}}
{{- end -}}
{{- if and .Values.mtls.enabled (not .Values.mtls.clientCASecret) (eq .Values.certificates.source "generate") -}}
{{- fail "mtls.enabled with certificates.source=generate: the generated CA's key is discarded, so no client certificate for the API server can be signed by it; set mtls.clientCASecret, or use certificates.source secret or certManager" -}}
{{- end -}}
{{- if and (not .Values.policies.existingConfigMap) (not .Values.policies.shipped) (not .Values.policies.extra) -}}
{{- fail "no policies: set policies.shipped, policies.extra or policies.existingConfigMap (an empty policy set would admit everything, so the server refuses it)" -}}
{{- end -}}
{{- end -}}


{{/*
The RBAC of `serve --audit` (the kustomize component deploy/audit/), for a base that has no such
component yet; files/rbac/audit.yaml replaces it when sync-chart-files.sh finds one.
*/}}
{{- define "trainguard.auditRBAC" -}}
# `serve --audit`: read every workload kind trainguard decides, write policy reports, and hold the
# Lease that elects the one replica that writes (the kustomize component deploy/audit/).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: trainguard-audit
  labels:
    app.kubernetes.io/name: trainguard
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [list, watch]
  - apiGroups: [apps]
    resources: [deployments, statefulsets]
    verbs: [list, watch]
  - apiGroups: [batch]
    resources: [jobs]
    verbs: [list, watch]
  - apiGroups: [kubeflow.org]
    resources: [pytorchjobs, mpijobs]
    verbs: [list, watch]
  - apiGroups: [trainer.kubeflow.org]
    resources: [trainjobs]
    verbs: [list, watch]
  - apiGroups: [batch.volcano.sh]
    resources: [jobs]
    verbs: [list, watch]
  - apiGroups: [jobset.x-k8s.io]
    resources: [jobsets]
    verbs: [list, watch]
  - apiGroups: [ray.io]
    resources: [rayjobs, rayclusters]
    verbs: [list, watch]
  - apiGroups: [leaderworkerset.x-k8s.io]
    resources: [leaderworkersets]
    verbs: [list, watch]
  - apiGroups: [wgpolicyk8s.io]
    resources: [policyreports, clusterpolicyreports]
    verbs: [list, create, patch, delete]
  - apiGroups: [openreports.io]
    resources: [reports, clusterreports]
    verbs: [list, create, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: trainguard-audit
  labels:
    app.kubernetes.io/name: trainguard
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: trainguard-audit
subjects:
  - kind: ServiceAccount
    name: trainguard
    namespace: trainguard-system
---
# The Lease trainguard-audit, in the release namespace only (create cannot be limited by name).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: trainguard-audit-lease
  namespace: trainguard-system
  labels:
    app.kubernetes.io/name: trainguard
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [trainguard-audit]
    verbs: [get, update]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: trainguard-audit-lease
  namespace: trainguard-system
  labels:
    app.kubernetes.io/name: trainguard
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: trainguard-audit-lease
subjects:
  - kind: ServiceAccount
    name: trainguard
    namespace: trainguard-system
{{- end -}}
