{{/* Names and labels shared by every template. */}}

{{- define "endpoint-optimizer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "endpoint-optimizer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "endpoint-optimizer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "endpoint-optimizer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "endpoint-optimizer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's pods, apart from the sandbox's (component: sandbox) in the same release. */}}
{{- define "endpoint-optimizer.operatorSelectorLabels" -}}
{{ include "endpoint-optimizer.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "endpoint-optimizer.labels" -}}
helm.sh/chart: {{ include "endpoint-optimizer.chart" . }}
{{ include "endpoint-optimizer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "endpoint-optimizer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "endpoint-optimizer.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "endpoint-optimizer.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The rules the operator needs inside every namespace it handles. The RBAC test
(tests/unit/chart/test_rbac.py) derives the same set from the operator's code and
kopf's needs; change both together.
*/}}
{{- define "endpoint-optimizer.namespacedRules" -}}
# Its own resources: kopf lists and watches them and patches finalizers and annotations.
- apiGroups: ["optimizer.dev"]
  resources: ["optimizedendpoints"]
  verbs: ["list", "watch", "patch"]
# Status is a subresource: kopf and the operator write it with a patch.
- apiGroups: ["optimizer.dev"]
  resources: ["optimizedendpoints/status"]
  verbs: ["patch"]
# Kopf posts Events about handler progress; the operator posts its own.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Eval and benchmark datasets: the ConfigMap a spec names (spec.evaluation.dataset,
# spec.benchmark.dataset) is read with one GET when a measurement needs it. No list or
# watch: the operator never holds the namespace's other ConfigMaps. The spot check's
# samples (spec.evaluation.spotCheck) are written to <name>-spot-check, owned by the
# OptimizedEndpoint: created once, then replaced.
# A benchmark level beyond the operator's limits (benchmark.maxShards) runs as an Indexed
# Job whose pods use this ServiceAccount: the operator writes the plan ConfigMap, the pods
# `get` it and `create` their results (and `create`, then `patch`, a count of requests
# done while they run), the operator lists a run's ConfigMaps by label and deletes the
# plan, results and counts after merging. Nothing else in the namespace is listed.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "create", "update", "patch", "delete"]
# The shard Job itself: created, read for its failedIndexes, deleted. No list or watch.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "delete"]
{{- end -}}

{{/* Kopf's start-up scan: read-only, cluster-scoped. */}}
{{- define "endpoint-optimizer.scanningRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if .Values.watchNamespaces }}
# Only a namespaced install: kopf lists and watches namespaces to match the names given.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end -}}

{{/* Where the operator sends AWS calls in the sandbox profile. */}}
{{- define "endpoint-optimizer.sandboxUrl" -}}
{{- if .Values.sandbox.endpointUrl -}}
{{- .Values.sandbox.endpointUrl -}}
{{- else if .Values.sandbox.deploy -}}
{{- printf "http://%s-sandbox.%s.svc:%v" (include "endpoint-optimizer.fullname" .) .Release.Namespace .Values.sandbox.port -}}
{{- else -}}
{{- fail "sandbox.enabled with sandbox.deploy false needs sandbox.endpointUrl" -}}
{{- end -}}
{{- end -}}
