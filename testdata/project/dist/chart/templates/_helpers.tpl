{{/*
Named templates of the chart, included by its templates. Written by `rustbuilder edit --plugins
helm/v2-alpha` when the chart has none; yours to edit from then on (the command keeps this file, and
`--force` writes it again).
*/}}

{{/*
The value of `app.kubernetes.io/name` on every object and in every selector: the chart's name, cut to
the 63 characters a label value may have. config/ sets the project's name there, which the chart is
named after.
*/}}
{{- define "project.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels of every object the chart installs, in place of config/'s `app.kubernetes.io/name` and
`app.kubernetes.io/managed-by`: which chart, version and release installed it. Selectors and pod
templates keep `app.kubernetes.io/name` alone, so that an upgrade never changes what they select.
*/}}
{{- define "project.labels" -}}
app.kubernetes.io/name: {{ include "project.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
