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

{{/* The webhook configurations register failurePolicy Fail/Ignore and 5 s when the server registers. */}}
{{- define "trainguard.checkValues" -}}
{{- $w := .Values.webhook -}}
{{- if and $w.selfRegister (or (ne $w.validating.failurePolicy "Fail") (ne $w.mutating.failurePolicy "Ignore") (ne (int $w.timeoutSeconds) 5)) -}}
{{- fail "webhook.validating.failurePolicy, webhook.mutating.failurePolicy and webhook.timeoutSeconds other than Fail, Ignore and 5 need webhook.selfRegister=false: the server registers those values when it registers itself" -}}
{{- end -}}
{{- if and (not $w.selfRegister) (ne .Values.certificates.source "certManager") (not .Values.certificates.caBundle) -}}
{{- fail "webhook.selfRegister=false needs the caBundle from elsewhere: certificates.source=certManager (cainjector fills it) or certificates.caBundle (PEM of the CA)" -}}
{{- end -}}
{{- if and .Values.certificates.caBundle (eq .Values.certificates.source "generate") -}}
{{- fail "certificates.caBundle cannot be known for certificates.source=generate (the Job makes a new CA): use source secret or certManager" -}}
{{- end -}}
{{- if and (not .Values.policies.existingConfigMap) (not .Values.policies.shipped) (not .Values.policies.extra) -}}
{{- fail "no policies: set policies.shipped, policies.extra or policies.existingConfigMap (an empty policy set would admit everything, so the server refuses it)" -}}
{{- end -}}
{{- end -}}
