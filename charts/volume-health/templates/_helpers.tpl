{{/* Labels Helm adds to every object, on top of the ones the kustomize install carries. */}}
{{- define "volume-health.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The labels of the webhook's objects, as the kustomize base sets them. */}}
{{- define "volume-health.labels" -}}
app.kubernetes.io/name: volume-health-webhook
{{ include "volume-health.helmLabels" . }}
app.kubernetes.io/part-of: volume-health
{{- end }}

{{/* The webhook pods' labels, which every selector uses. */}}
{{- define "volume-health.selectorLabels" -}}
app.kubernetes.io/name: volume-health-webhook
app.kubernetes.io/component: admission-webhook
{{- end }}

{{- define "volume-health.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end }}

{{- define "volume-health.doctorImage" -}}
{{ .Values.doctor.image.repository }}:{{ .Values.doctor.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end }}

{{/* The webhooks' trust: cert-manager injects the CA, the other sources give it here. */}}
{{- define "volume-health.caBundle" -}}
{{- if eq .Values.certificates.source "provided" -}}
caBundle: {{ required "certificates.provided.caCrt is required" .Values.certificates.provided.caCrt | b64enc }}
{{- else if eq .Values.certificates.source "existingSecret" -}}
caBundle: {{ required "certificates.existingSecret.caCrt is required" .Values.certificates.existingSecret.caCrt | b64enc }}
{{- end -}}
{{- end }}

{{- define "volume-health.webhookAnnotations" -}}
{{- if eq .Values.certificates.source "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/volume-health-webhook
{{- end }}
{{- end }}

{{/* The Service the apiserver calls, with the path of one endpoint. */}}
{{- define "volume-health.clientConfig" -}}
clientConfig:
  {{- with include "volume-health.caBundle" .root }}
  {{ . }}
  {{- end }}
  service:
    name: volume-health-webhook
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end }}

{{/* The webhooks never see their own namespace (they could block their own pods). */}}
{{- define "volume-health.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [{{ .Release.Namespace | quote }}]
{{- end }}

{{/* The writer list as CEL string literals: single-quoted, backslash and quote escaped. A
blank entry, a comma (the server's separator) or a control character would silently mean
another list, or break the YAML: refused at render time. */}}
{{- define "volume-health.celStrings" -}}
{{- $quoted := list }}
{{- range . }}
{{- /* Printable as Go's strconv.IsPrint (the server's test too): letters, marks, numbers,
punctuation, symbols and the ASCII space. Anything else, U+0085, U+2028 and U+2029 among them,
could end the string in the YAML block it is written into. */}}
{{- if or (not (kindIs "string" .)) (eq (trim (toString .)) "") (regexMatch "[^\\p{L}\\p{M}\\p{N}\\p{P}\\p{S} ]|," (toString .)) }}
{{- fail (printf "pvcHealthWriters: %q is not a username (blank entries, commas and characters that are not printable are refused)" (toString .)) }}
{{- end }}
{{- $quoted = append $quoted (printf "'%s'" (trim . | replace "\\" "\\\\" | replace "'" "\\'")) }}
{{- end }}
{{- join ", " $quoted }}
{{- end }}
