{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "libvirt-provider.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "libvirt-provider.fullname" -}}
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

{{- define "libvirt-provider.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "libvirt-provider.selectorLabels" -}}
app.kubernetes.io/name: {{ include "libvirt-provider.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "libvirt-provider.labels" -}}
helm.sh/chart: {{ include "libvirt-provider.chart" . }}
{{ include "libvirt-provider.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: capacity-provider
app.kubernetes.io/part-of: bigfleet
{{- end }}

{{- define "libvirt-provider.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "libvirt-provider.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "libvirt-provider.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Mount points inside the container; the binary path must match the Dockerfile's ENTRYPOINT. */}}
{{- define "libvirt-provider.binary" -}}/usr/local/bin/libvirt{{- end }}
{{- define "libvirt-provider.configDir" -}}/etc/bigfleet/config{{- end }}
{{- define "libvirt-provider.tlsDir" -}}/etc/bigfleet/tls{{- end }}
{{- define "libvirt-provider.sshDir" -}}/etc/bigfleet/libvirt-ssh{{- end }}
{{- define "libvirt-provider.pkiDir" -}}/etc/bigfleet/libvirt-pki{{- end }}
{{- define "libvirt-provider.adminCADir" -}}/etc/bigfleet/admin-ca{{- end }}
{{- define "libvirt-provider.stateDir" -}}/var/lib/libvirt-provider{{- end }}

{{- define "libvirt-provider.sshSecret" -}}
{{- default (printf "%s-libvirt-ssh" (include "libvirt-provider.fullname" .)) .Values.libvirt.ssh.secretName }}
{{- end }}
{{- define "libvirt-provider.pkiSecret" -}}
{{- default (printf "%s-libvirt-pki" (include "libvirt-provider.fullname" .)) .Values.libvirt.tls.secretName }}
{{- end }}
{{- define "libvirt-provider.tlsSecret" -}}
{{- default (printf "%s-tls" (include "libvirt-provider.fullname" .)) .Values.tls.secretName }}
{{- end }}
{{- define "libvirt-provider.leaseName" -}}
{{- default (include "libvirt-provider.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The shared journal's ConfigMap: the provider derives the same name from --leader-elect-lease-name. */}}
{{- define "libvirt-provider.journalName" -}}
{{- printf "%s-intents" (include "libvirt-provider.leaseName" .) }}
{{- end }}

{{/* The state lives on a claim: durable state without leader election. */}}
{{- define "libvirt-provider.stateClaim" -}}
{{- if and (not .Values.state.inMemory) (not .Values.leaderElection.enabled) }}true{{- end }}
{{- end }}

{{- define "libvirt-provider.pvcName" -}}
{{- default (printf "%s-state" (include "libvirt-provider.fullname" .)) .Values.state.existingClaim }}
{{- end }}

{{/*
Refuse combinations that cannot work or that weaken the defaults. Included
by every template, so `helm template` fails before anything is applied.
*/}}
{{- define "libvirt-provider.validate" -}}
{{- $mode := .Values.libvirt.mode }}
{{- if not (has $mode (list "ssh" "tls" "socket")) }}
{{- fail (printf "libvirt.mode %q: want ssh, tls or socket" $mode) }}
{{- end }}
{{- if eq $mode "socket" }}
{{- if gt (len .Values.libvirt.hosts) 1 }}
{{- fail "libvirt.mode=socket serves the one host the pod runs on: give at most one libvirt.hosts entry" }}
{{- end }}
{{- if kindIs "invalid" .Values.libvirt.socket.groupId }}
{{- fail "libvirt.mode=socket needs libvirt.socket.groupId: the GID owning the libvirt socket on the host (unix_sock_group)" }}
{{- end }}
{{- end }}
{{- if and .Values.tls.mtls (not .Values.tls.enabled) }}
{{- fail "tls.mtls=true needs tls.enabled=true" }}
{{- end }}
{{- if and (gt (int64 .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicas=%v needs leaderElection.enabled=true: two providers acting at once would drive the same VMs twice" .Values.replicas) }}
{{- end }}
{{- if lt (int64 .Values.replicas) 1 }}
{{- fail "replicas must be at least 1" }}
{{- end }}
{{- if and .Values.leaderElection.enabled .Values.state.existingClaim }}
{{- fail "state.existingClaim needs leaderElection.enabled=false: under leader election each pod keeps its state on an emptyDir (docs/ha.md)" }}
{{- end }}
{{- if not (has .Values.leaderElection.antiAffinity (list "soft" "hard")) }}
{{- fail (printf "leaderElection.antiAffinity %q: want soft or hard" .Values.leaderElection.antiAffinity) }}
{{- end }}
{{- $adm := .Values.admin }}
{{- if and $adm.listener.caSecret (not $adm.listener.enabled) }}
{{- fail "admin.listener.caSecret needs admin.listener.enabled=true" }}
{{- end }}
{{- if and $adm.listener.caSecret (not .Values.tls.enabled) }}
{{- fail "admin.listener.caSecret needs tls.enabled=true: the admin listener serves the grpc certificate" }}
{{- end }}
{{- if and $adm.write (not (or .Values.tls.mtls (and $adm.listener.enabled $adm.listener.caSecret))) }}
{{- fail "admin.write=true needs mTLS on the listener serving the admin API: tls.mtls=true, or admin.listener.enabled with admin.listener.caSecret" }}
{{- end }}
{{- if not (has .Values.tls.callerIdentity (list "bigfleet" "any")) }}
{{- fail (printf "tls.callerIdentity %q: want bigfleet or any" .Values.tls.callerIdentity) }}
{{- end }}
{{- if and $adm.clients (not $adm.write) }}
{{- fail "admin.clients has no effect without admin.write=true" }}
{{- end }}
{{- if and (ne .Values.service.type "ClusterIP") (not (and .Values.tls.enabled .Values.tls.mtls)) }}
{{- fail (printf "service.type=%s exposes the provider outside the cluster: only allowed with tls.enabled=true and tls.mtls=true" .Values.service.type) }}
{{- end }}
{{- if not (has .Values.logging.format (list "json" "text")) }}
{{- fail (printf "logging.format %q: want json or text" .Values.logging.format) }}
{{- end }}
{{- end }}

{{/* The --connect value: zone=URI pairs built from libvirt.hosts per mode. */}}
{{- define "libvirt-provider.connect" -}}
{{- if .Values.libvirt.connect }}
{{- .Values.libvirt.connect }}
{{- else }}
{{- $mode := .Values.libvirt.mode }}
{{- $ssh := .Values.libvirt.ssh }}
{{- $sshDir := include "libvirt-provider.sshDir" . }}
{{- $pkiDir := include "libvirt-provider.pkiDir" . }}
{{- $out := list }}
{{- if and (eq $mode "socket") (eq (len .Values.libvirt.hosts) 0) }}
{{- $out = append $out "qemu:///system" }}
{{- end }}
{{- range $i, $h := .Values.libvirt.hosts }}
{{- $zone := required (printf "libvirt.hosts[%d].zone is required" $i) $h.zone }}
{{- $uri := "qemu:///system" }}
{{- if eq $mode "ssh" }}
{{- $addr := required (printf "libvirt.hosts[%d].address is required" $i) $h.address }}
{{- $uri = printf "qemu+libssh://%s@%s:%v/system?keyfile=%s/id&known_hosts=%s/known_hosts&known_hosts_verify=normal&sshauth=privkey" (default $ssh.user $h.user) $addr (int64 (default $ssh.port $h.port)) $sshDir $sshDir }}
{{- else if eq $mode "tls" }}
{{- $addr := required (printf "libvirt.hosts[%d].address is required" $i) $h.address }}
{{- $uri = printf "qemu+tls://%s:%v/system?pkipath=%s" $addr (int64 (default $.Values.libvirt.tls.port $h.port)) $pkiDir }}
{{- end }}
{{- $out = append $out (printf "%s=%s" $zone $uri) }}
{{- end }}
{{- join "," $out }}
{{- end }}
{{- end }}

{{/* The container's flags, one per line (rendered as a YAML list). */}}
{{- define "libvirt-provider.args" -}}
{{- $v := .Values }}
{{- $args := list }}
{{- $args = append $args (printf "--addr=:%v" (int64 $v.grpc.port)) }}
{{- $args = append $args (printf "--metrics-addr=:%v" (int64 $v.metrics.port)) }}
{{- $args = append $args (printf "--reflection=%t" $v.grpc.reflection) }}
{{- $args = append $args (printf "--provider=%s" $v.provider) }}
{{- $connect := include "libvirt-provider.connect" . }}
{{- if $connect }}
{{- $args = append $args (printf "--connect=%s" $connect) }}
{{- end }}
{{- $args = append $args (printf "--default-zone=%s" $v.libvirt.defaultZone) }}
{{- if $v.storage.image }}
{{- $args = append $args (printf "--image=%s" $v.storage.image) }}
{{- end }}
{{- $args = append $args (printf "--storage-pool=%s" $v.storage.pool) }}
{{- $args = append $args (printf "--network=%s" $v.network) }}
{{- $cfg := include "libvirt-provider.configDir" . }}
{{- if $v.baseUserData }}
{{- $args = append $args (printf "--base-user-data=%s/user-data" $cfg) }}
{{- end }}
{{- if $v.kernel.path }}
{{- $args = append $args (printf "--kernel=%s" $v.kernel.path) }}
{{- end }}
{{- if $v.kernel.initrd }}
{{- $args = append $args (printf "--initrd=%s" $v.kernel.initrd) }}
{{- end }}
{{- if $v.kernel.cmdline }}
{{- $args = append $args (printf "--cmdline=%s" $v.kernel.cmdline) }}
{{- end }}
{{- if and $v.domainType (ne $v.domainType "auto") }}
{{- $args = append $args (printf "--domain-type=%s" $v.domainType) }}
{{- end }}
{{- if $v.capacity.offerings }}
{{- $args = append $args (printf "--offerings=%s/offerings.json" $cfg) }}
{{- end }}
{{- if $v.capacity.instanceTypes }}
{{- $args = append $args (printf "--instance-types=%s/instance-types.json" $cfg) }}
{{- end }}
{{- if not (kindIs "invalid" $v.capacity.seedCount) }}
{{- $args = append $args (printf "--seed-count=%d" (int64 $v.capacity.seedCount)) }}
{{- end }}
{{- $args = append $args (printf "--capacity-type=%s" $v.capacity.capacityType) }}
{{- if $v.pricing.prices }}
{{- $p := list }}
{{- range $k, $price := $v.pricing.prices }}
{{- $p = append $p (printf "%s=%v" $k $price) }}
{{- end }}
{{- $args = append $args (printf "--prices=%s" (join "," $p)) }}
{{- end }}
{{- if not (kindIs "invalid" $v.pricing.perVCPUHour) }}
{{- $args = append $args (printf "--price-per-vcpu-hour=%v" $v.pricing.perVCPUHour) }}
{{- end }}
{{- if not (kindIs "invalid" $v.pricing.perGiBHour) }}
{{- $args = append $args (printf "--price-per-gib-hour=%v" $v.pricing.perGiBHour) }}
{{- end }}
{{- if not $v.state.inMemory }}
{{- $args = append $args (printf "--state=%s/state.db" (include "libvirt-provider.stateDir" .)) }}
{{- end }}
{{- range $flag, $d := dict "create-timeout" $v.timeouts.create "configure-timeout" $v.timeouts.configure "drain-timeout" $v.timeouts.drain "delete-timeout" $v.timeouts.delete "shutdown-timeout" $v.timeouts.shutdown "reconcile-interval" $v.reconcileInterval }}
{{- if not (kindIs "invalid" $d) }}
{{- $args = append $args (printf "--%s=%v" $flag $d) }}
{{- end }}
{{- end }}
{{- if $v.tls.enabled }}
{{- $dir := include "libvirt-provider.tlsDir" . }}
{{- $args = append $args (printf "--tls-cert=%s/tls.crt" $dir) }}
{{- $args = append $args (printf "--tls-key=%s/tls.key" $dir) }}
{{- if $v.tls.mtls }}
{{- $args = append $args (printf "--tls-ca=%s/ca.crt" $dir) }}
{{- $args = append $args (printf "--caller-identity=%s" $v.tls.callerIdentity) }}
{{- end }}
{{- end }}
{{- $args = append $args (printf "--log-level=%s" $v.logging.level) }}
{{- $args = append $args (printf "--log-format=%s" $v.logging.format) }}
{{- $args = append $args (printf "--admin-write=%t" $v.admin.write) }}
{{- with $v.admin.clients }}
{{- $args = append $args (printf "--admin-clients=%s" (join "," .)) }}
{{- end }}
{{- if $v.admin.listener.enabled }}
{{- $args = append $args (printf "--admin-addr=:%d" ($v.admin.listener.port | int64)) }}
{{- if $v.admin.listener.caSecret }}
{{- $args = append $args (printf "--admin-tls-ca=%s/ca.crt" (include "libvirt-provider.adminCADir" .)) }}
{{- end }}
{{- end }}
{{- if $v.leaderElection.enabled }}
{{- $le := $v.leaderElection }}
{{- $args = append $args "--leader-elect=true" }}
{{- $args = append $args (printf "--leader-elect-lease=%s" $le.lease) }}
{{- $args = append $args (printf "--leader-elect-renew=%s" $le.renew) }}
{{- $args = append $args (printf "--leader-elect-retry=%s" $le.retry) }}
{{- $args = append $args (printf "--leader-elect-lease-name=%s" (include "libvirt-provider.leaseName" .)) }}
{{- $args = append $args (printf "--libvirt-call-timeout=%s" $le.libvirtCallTimeout) }}
{{- end }}
{{- range $v.extraArgs }}
{{- $args = append $args (toString .) }}
{{- end }}
{{- toYaml $args }}
{{- end }}

{{/*
The memory limit the container runs under: resources.limits.memory when
set, else memory.baseMiB + memory.perTenThousandMiB per started 10,000 of
expectedMachines (values.yaml gives the measurement behind the figures).
*/}}
{{- define "libvirt-provider.memoryLimit" -}}
{{- $explicit := dig "limits" "memory" "" (.Values.resources | default dict) }}
{{- if $explicit }}
{{- include "libvirt-provider.quantityString" $explicit }}
{{- else }}
{{- $n := .Values.expectedMachines }}
{{- if or (kindIs "invalid" $n) (kindIs "string" $n) (lt (float64 $n) 0.0) (ne (float64 $n) (float64 (int64 $n))) }}
{{- fail (printf "expectedMachines %v: want a whole number of machines (0 or more)" $n) }}
{{- end }}
{{- $m := .Values.memory }}
{{- $tens := div (add (int64 $n) 9999) 10000 }}
{{- printf "%dMi" (add (int64 $m.baseMiB) (mul (int64 $m.perTenThousandMiB) $tens)) }}
{{- end }}
{{- end }}

{{/* A quantity value as a string: YAML numbers arrive as float64. */}}
{{- define "libvirt-provider.quantityString" -}}
{{- if kindIs "string" . }}{{ trim . }}{{ else }}{{ printf "%.0f" (float64 .) }}{{ end }}
{{- end }}

{{/*
A Kubernetes memory quantity (plain bytes, or a decimal/binary suffix:
k M G T P E, Ki Mi Gi Ti Pi Ei; decimals allowed) in bytes, as an integer.
*/}}
{{- define "libvirt-provider.quantityBytes" -}}
{{- $q := include "libvirt-provider.quantityString" . }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $suffix := trimPrefix $num $q }}
{{- $mult := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 }}
{{- if or (not $num) (not (hasKey $mult $suffix)) }}
{{- fail (printf "resources.limits.memory %q: want a byte quantity such as 512Mi, 1Gi or 536870912" $q) }}
{{- end }}
{{- printf "%.0f" (mulf (float64 $num) (get $mult $suffix)) }}
{{- end }}

{{/*
GOMEMLIMIT for the Go runtime: memory.goMemLimitPercent of the memory
limit, in MiB (Go's own syntax). Empty when the percentage is 0.
*/}}
{{- define "libvirt-provider.goMemLimit" -}}
{{- $pct := .Values.memory.goMemLimitPercent | default 0 | float64 }}
{{- if or (lt $pct 0.0) (gt $pct 100.0) }}
{{- fail (printf "memory.goMemLimitPercent %v: want 0 (no GOMEMLIMIT) to 100" .Values.memory.goMemLimitPercent) }}
{{- end }}
{{- if gt $pct 0.0 }}
{{- $bytes := include "libvirt-provider.quantityBytes" (include "libvirt-provider.memoryLimit" .) | float64 }}
{{- $mib := floor (divf (mulf $bytes $pct) (mulf 100.0 1048576.0)) | int64 }}
{{- if lt $mib 1 }}
{{- fail (printf "GOMEMLIMIT from a memory limit of %s would be under 1 MiB" (include "libvirt-provider.memoryLimit" .)) }}
{{- end }}
{{- printf "%dMiB" $mib }}
{{- end }}
{{- end }}

{{/*
The container's resources: .Values.resources with the memory limit filled
in from expectedMachines when not set, and the memory request equal to the
limit when not set (memory is not compressible: a request below the peak
lets the node overcommit and OOM-kill or evict the provider first).
*/}}
{{- define "libvirt-provider.resources" -}}
{{- $res := deepCopy (.Values.resources | default dict) }}
{{- $limit := include "libvirt-provider.memoryLimit" . }}
{{- $limits := get $res "limits" | default dict }}
{{- if not (get $limits "memory") }}
{{- $_ := set $limits "memory" $limit }}
{{- end }}
{{- $_ := set $res "limits" $limits }}
{{- $requests := get $res "requests" | default dict }}
{{- if not (get $requests "memory") }}
{{- $_ := set $requests "memory" $limit }}
{{- end }}
{{- $_ := set $res "requests" $requests }}
{{- toYaml $res }}
{{- end }}

{{/* Whether extraEnv sets GOMEMLIMIT itself (then the chart does not). */}}
{{- define "libvirt-provider.extraEnvHasGoMemLimit" -}}
{{- range .Values.extraEnv }}{{ if eq (toString .name) "GOMEMLIMIT" }}true{{ end }}{{ end }}
{{- end }}
