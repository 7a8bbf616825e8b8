{{/* Chart name, truncated to the 63 characters a label value may hold. */}}
{{- define "mcm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "mcm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mcm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mcm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: machine-controller-manager
{{- end }}

{{- define "mcm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcm.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Namespace of the machine objects (--namespace). */}}
{{- define "mcm.controlNamespace" -}}
{{- default .Release.Namespace .Values.controlNamespace }}
{{- end }}

{{- define "mcm.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "mcm.metricsServiceName" -}}
{{- printf "%s-metrics" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcm.grpcServiceName" -}}
{{- printf "%s-grpc" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether the gRPC server runs with mTLS. */}}
{{- define "mcm.grpcTLS" -}}
{{- if and .Values.grpc.enabled (not .Values.grpc.insecure) }}true{{- end }}
{{- end }}

{{/* Secret with the server certificate (tls.crt, tls.key) and the CA that signed it (ca.crt). */}}
{{- define "mcm.grpcServerSecretName" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else }}
{{- printf "%s-grpc-server-tls" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "mcm.grpcCASecretName" -}}
{{- printf "%s-grpc-ca" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcm.grpcClientCASecretNameOwn" -}}
{{- printf "%s-grpc-client-ca" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common name of the client certificate the chart issues for cluster-autoscaler. */}}
{{- define "mcm.clientCommonName" -}}cluster-autoscaler{{- end }}

{{/*
Whether the chart makes the CA that signs client certificates (its own, separate from the server
CA): with generated certificates, and with cert-manager when the chart also makes the server CA.
*/}}
{{- define "mcm.grpcOwnClientCA" -}}
{{- if and (not .Values.tls.existingSecret) (not (and .Values.tls.certManager.enabled .Values.tls.certManager.issuerRef.name)) }}true{{- end }}
{{- end }}

{{/*
Secret and key of the CA bundle that verifies client certificates (--grpc-client-ca-file), as JSON
{"name", "key"}: with tls.existingSecret, tls.clientCA.existingSecret (default: tls.existingSecret)
and tls.clientCA.key (default ca.crt, as before); with cert-manager and your issuerRef, ca.crt of
the server Secret (the issuer's CA, as before); else the chart's own client CA.
*/}}
{{- define "mcm.grpcClientCA" -}}
{{- if .Values.tls.existingSecret }}
{{- dict "name" (default .Values.tls.existingSecret .Values.tls.clientCA.existingSecret) "key" .Values.tls.clientCA.key | toJson }}
{{- else if include "mcm.grpcOwnClientCA" . }}
{{- dict "name" (include "mcm.grpcClientCASecretNameOwn" .) "key" "tls.crt" | toJson }}
{{- else }}
{{- dict "name" (include "mcm.grpcServerSecretName" .) "key" "ca.crt" | toJson }}
{{- end }}
{{- end }}

{{/*
--grpc-client-allowed-names, comma-separated (empty: any client certificate the client CA signed):
tls.allowedClientNames when set; else the common name of the client certificate the chart issues
(when it issues one); else empty, as before.
*/}}
{{- define "mcm.grpcAllowedClientNames" -}}
{{- if .Values.tls.allowedClientNames }}
{{- join "," .Values.tls.allowedClientNames }}
{{- else if and .Values.tls.clientSecret.create (not .Values.tls.existingSecret) }}
{{- include "mcm.clientCommonName" . }}
{{- end }}
{{- end }}

{{- define "mcm.clientSecretName" -}}
{{- printf "%s-autoscaler-client-tls" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcm.clientSecretNamespace" -}}
{{- default .Release.Namespace .Values.tls.clientSecret.namespace }}
{{- end }}

{{/* DNS names the server certificate must hold: the gRPC Service in every usual spelling. */}}
{{- define "mcm.grpcDnsNames" -}}
{{- $svc := include "mcm.grpcServiceName" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) }}
{{- concat $names .Values.tls.extraDnsNames | toJson }}
{{- end }}

{{/* The address the autoscaler dials: host:port of the gRPC Service. */}}
{{- define "mcm.grpcClientAddress" -}}
{{- printf "%s.%s.svc:%d" (include "mcm.grpcServiceName" .) .Release.Namespace (int .Values.grpc.port) }}
{{- end }}

{{/* Fails on combinations of values that cannot work, with a message that says what to change. */}}
{{- define "mcm.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: more than one replica needs leader election (set leaderElection.enabled=true or replicaCount=1)" (int .Values.replicaCount)) }}
{{- end }}
{{- if and (eq .Values.targetCluster.mode "kubeconfig") (not .Values.targetCluster.kubeconfigSecret.name) }}
{{- fail "targetCluster.mode is kubeconfig but targetCluster.kubeconfigSecret.name is empty: name the Secret that holds the target cluster's kubeconfig" }}
{{- end }}
{{- if and .Values.tls.existingSecret .Values.tls.certManager.enabled }}
{{- fail "tls.existingSecret and tls.certManager.enabled are both set: choose one source of the gRPC certificates" }}
{{- end }}
{{- if and .Values.tls.clientCA.existingSecret (not .Values.tls.existingSecret) }}
{{- fail "tls.clientCA.existingSecret is set without tls.existingSecret: it names the client CA that goes with your own server Secret; generated and cert-manager certificates come with a client CA of their own" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set either minAvailable or maxUnavailable (set the other to null)" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (le (int .Values.replicaCount) (int .Values.podDisruptionBudget.minAvailable)) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%d with replicaCount=%d would block every voluntary eviction (node drains) forever: raise replicaCount or use maxUnavailable" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) }}
{{- end }}
{{- if and (include "mcm.grpcTLS" .) .Values.tls.certManager.enabled .Values.tls.clientSecret.create (ne (include "mcm.clientSecretNamespace" .) .Release.Namespace) (ne .Values.tls.certManager.issuerRef.kind "ClusterIssuer") }}
{{- fail "tls.clientSecret.namespace differs from the release namespace: cert-manager can issue the client certificate there only from a ClusterIssuer (set tls.certManager.issuerRef to one)" }}
{{- end }}
{{- if .Values.machineController.sidecar.enabled }}
{{- if not .Values.machineController.sidecar.image }}
{{- fail "machineController.sidecar.enabled needs machineController.sidecar.image: the gardener provider image (e.g. machine-controller-manager-provider-aws)" }}
{{- end }}
{{- if hasKey .Values.flags "controllers" }}
{{- fail "flags.controllers is set with machineController.sidecar.enabled: with the sidecar the manager runs machineset, machinedeployment and safety, and the sidecar the machine controller; drop flags.controllers" }}
{{- end }}
{{- if eq .Values.leaderElection.resourceName "machine-controller" }}
{{- fail "leaderElection.resourceName is machine-controller, the Lease gardener's provider sidecar holds: choose another name" }}
{{- end }}
{{- if eq (int .Values.machineController.sidecar.port) (int .Values.metrics.port) }}
{{- fail "machineController.sidecar.port equals metrics.port: the two containers share the pod's network, give them different ports" }}
{{- end }}
{{- end }}
{{- range .Values.grpc.nodeGroups }}
{{- if gt (int .min) (int .max) }}
{{- fail (printf "grpc.nodeGroups %s: min (%d) is greater than max (%d)" .name (int .min) (int .max)) }}
{{- end }}
{{- end }}
{{- end }}
