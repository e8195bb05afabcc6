{{/* Names. Every object name is derived here, nowhere else. */}}
{{- define "alchemist.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "alchemist.userNamespace" -}}
{{- default .Release.Namespace .Values.singleuser.namespace -}}
{{- end -}}

{{- define "alchemist.hubName" -}}{{ include "alchemist.fullname" . }}-hub{{- end -}}
{{- define "alchemist.proxyName" -}}{{ include "alchemist.fullname" . }}-proxy{{- end -}}
{{- define "alchemist.proxyApiName" -}}{{ include "alchemist.fullname" . }}-proxy-api{{- end -}}
{{- define "alchemist.proxyPublicName" -}}{{ include "alchemist.fullname" . }}-proxy-public{{- end -}}
{{- define "alchemist.secretName" -}}{{ include "alchemist.fullname" . }}-hub-secret{{- end -}}
{{- define "alchemist.userServiceAccount" -}}{{ include "alchemist.fullname" . }}-user{{- end -}}
{{- define "alchemist.workerServiceAccount" -}}{{ include "alchemist.fullname" . }}-worker{{- end -}}
{{- define "alchemist.sharedClaim" -}}
{{- default (printf "%s-shared" (include "alchemist.fullname" .)) .Values.shared.existingClaim -}}
{{- end -}}

{{- define "alchemist.hubImage" -}}
{{- printf "%s:%s" .Values.hub.image.repository .Values.hub.image.tag -}}
{{- end -}}

{{/* Labels. */}}
{{- define "alchemist.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "alchemist.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The secret values: taken from values when given, else from the Secret of a previous
release (so an upgrade keeps sessions and the proxy token), else generated.
Usage: include "alchemist.secretValue" (list $ "key" .Values.hub.cookieSecret)
*/}}
{{- define "alchemist.secretValue" -}}
{{- $root := index . 0 -}}
{{- $key := index . 1 -}}
{{- $given := index . 2 -}}
{{- if $given -}}
{{- $given -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (include "alchemist.secretName" $root) -}}
{{- if and $existing (hasKey $existing.data $key) -}}
{{- index $existing.data $key | b64dec -}}
{{- else -}}
{{- randAlphaNum 64 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The hub config document read by alchemist.hub.kubernetes.configure_from_file in the hub pod.
Helm resolves every name here; the Python side holds no naming rules.
*/}}
{{- define "alchemist.hubConfig" -}}
{{- $ns := include "alchemist.userNamespace" . -}}
{{- $hub := dict
  "connectUrl" (printf "http://%s.%s:8081" (include "alchemist.hubName" .) .Release.Namespace)
  "proxyApiUrl" (printf "http://%s.%s:8001" (include "alchemist.proxyApiName" .) .Release.Namespace)
  "baseUrl" .Values.hub.baseUrl
  "authenticator" .Values.hub.authenticator
  "adminUsers" .Values.hub.adminUsers
  "allowedUsers" .Values.hub.allowedUsers
  "openSignup" .Values.hub.openSignup
  "namespace" .Release.Namespace
-}}
{{- /* db.type "url": the URL is a secret; the hub reads it from ALCHEMIST_HUB_DB_URL. */ -}}
{{- if eq .Values.hub.db.type "sqlite-memory" -}}
{{- $_ := set $hub "dbUrl" "sqlite://" -}}
{{- else if eq .Values.hub.db.type "sqlite-pvc" -}}
{{- $_ := set $hub "dbUrl" "sqlite:////srv/jupyterhub/jupyterhub.sqlite" -}}
{{- end -}}
{{- $pullSecrets := list -}}
{{- range .Values.imagePullSecrets -}}
{{- $pullSecrets = append $pullSecrets (dict "name" .) -}}
{{- end -}}
{{- $single := dict
  "namespace" $ns
  "image" (printf "%s:%s" .Values.singleuser.image.repository .Values.singleuser.image.tag)
  "imagePullPolicy" .Values.singleuser.image.pullPolicy
  "imagePullSecrets" $pullSecrets
  "workerImage" (printf "%s:%s" .Values.singleuser.workerImage.repository .Values.singleuser.workerImage.tag)
  "serviceAccount" (include "alchemist.userServiceAccount" .)
  "workerServiceAccount" (include "alchemist.workerServiceAccount" .)
  "gpuResource" .Values.singleuser.gpuResource
  "defaultUrl" .Values.singleuser.defaultUrl
  "uid" .Values.singleuser.uid
  "fsGid" .Values.singleuser.fsGid
  "startTimeout" .Values.singleuser.startTimeout
  "nodeSelector" .Values.singleuser.nodeSelector
  "tolerations" .Values.singleuser.tolerations
  "extraEnv" .Values.singleuser.extraEnv
  "home" .Values.singleuser.home
  "profiles" .Values.singleuser.profiles
-}}
{{- $doc := dict
  "hub" $hub
  "singleuser" $single
  "shared" (dict "claimName" (include "alchemist.sharedClaim" .) "mountPath" .Values.shared.mountPath)
  "kueue" (dict "enabled" .Values.kueue.enabled "localQueue" .Values.kueue.localQueue "clusterQueue" .Values.kueue.clusterQueue)
  "workers" .Values.workers
  "tenancy" (merge (dict "userClusterRole" (printf "%s-user" (include "alchemist.hubName" .))) .Values.tenancy)
  "datasets" .Values.datasets
  "networkPolicy" (dict "userEgress" (include "alchemist.userEgressRules" . | fromYamlArray))
-}}
{{- toYaml $doc -}}
{{- end -}}

{{/*
Where the pods of a user namespace may connect (docs/kubernetes.md, Isolation): the
namespace's own pods, DNS in kube-system, the hub's API, and (networkPolicy.egress.
allowAddresses) every address but networkPolicy.egress.deniedCIDRs (the cloud metadata
server), then networkPolicy.egress.extraRules. One list for both modes: the shared-mode
NetworkPolicy of templates/network/ and, in namespaces mode, the hub config's
networkPolicy.userEgress, which the pre-spawn hook (alchemist.hub.kubernetes.tenancy) applies in each user's
namespace.
*/}}
{{- define "alchemist.userEgressRules" -}}
{{- $egress := .Values.networkPolicy.egress -}}
{{- $v4 := list -}}
{{- $v6 := list -}}
{{- range $egress.deniedCIDRs -}}
{{- if contains ":" . -}}
{{- $v6 = append $v6 . -}}
{{- else -}}
{{- $v4 = append $v4 . -}}
{{- end -}}
{{- end -}}
{{- $rules := list
  (dict "to" (list (dict "podSelector" dict)))
  (dict
    "to" (list (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "kube-system"))))
    "ports" (list (dict "port" 53 "protocol" "UDP") (dict "port" 53 "protocol" "TCP")))
  (dict
    "to" (list (dict
      "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace))
      "podSelector" (dict "matchLabels" (merge (dict "app.kubernetes.io/component" "hub") (include "alchemist.selectorLabels" . | fromYaml)))))
    "ports" (list (dict "port" 8081 "protocol" "TCP")))
-}}
{{- if $egress.allowAddresses -}}
{{- $any4 := dict "cidr" "0.0.0.0/0" -}}
{{- with $v4 }}{{ $_ := set $any4 "except" . }}{{ end -}}
{{- $any6 := dict "cidr" "::/0" -}}
{{- with $v6 }}{{ $_ := set $any6 "except" . }}{{ end -}}
{{- $rules = append $rules (dict "to" (list (dict "ipBlock" $any4) (dict "ipBlock" $any6))) -}}
{{- end -}}
{{- range $egress.extraRules -}}
{{- $rules = append $rules . -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
