//go:build image

package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// containerSpec is the OCI runtime config for the chart's container:
// every security setting, the command, arguments, environment and mounts
// come from the rendered Deployment (r); the image's own environment comes
// first, as a runtime merges it. The container gets its own PID, IPC, UTS,
// mount and cgroup namespaces and shares the host's network namespace (the
// chart's ports were chosen free on the host), hostNetwork-style.
func containerSpec(t *testing.T, r rendered, img ociImage, rootfs string) runtimeSpec {
	t.Helper()
	pod := r.Deployment.Spec.Template.Spec
	c := pod.Containers[0]
	sc := c.SecurityContext
	var s runtimeSpec
	s.OCIVersion = "1.0.2"
	s.Hostname = "bf-libvirt-provider"
	s.Root.Path = rootfs
	s.Root.Readonly = deref(sc.ReadOnlyRootFilesystem, false)

	uid := firstSet(sc.RunAsUser, pod.SecurityContext.RunAsUser)
	gid := firstSet(sc.RunAsGroup, pod.SecurityContext.RunAsGroup)
	if uid == nil || gid == nil {
		t.Fatal("the chart sets no runAsUser/runAsGroup: the image would run as its USER")
	}
	if deref(sc.RunAsNonRoot, false) && *uid == 0 {
		t.Fatal("runAsNonRoot with runAsUser 0: the kubelet would refuse it")
	}
	if deref(sc.Privileged, false) {
		t.Fatal("the chart runs the container privileged")
	}
	p := &s.Process
	p.User.UID, p.User.GID = *uid, *gid
	// The kubelet adds fsGroup and supplementalGroups to the process's groups.
	if fs := pod.SecurityContext.FSGroup; fs != nil {
		p.User.AdditionalGids = append(p.User.AdditionalGids, *fs)
	}
	p.User.AdditionalGids = append(p.User.AdditionalGids, pod.SecurityContext.SupplementalGroups...)
	p.Args = append(slices.Clone(c.Command), c.Args...)
	if len(p.Args) == 0 {
		p.Args = img.config.Config.Entrypoint
	}
	p.Env = slices.Clone(img.config.Config.Env)
	for _, e := range c.Env {
		p.Env = append(p.Env, e.Name+"="+e.Value)
	}
	p.Cwd = "/"
	caps := capsOf(sc.Capabilities.Drop, sc.Capabilities.Add)
	p.Capabilities = specCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{}, Ambient: []string{}}
	// allowPrivilegeEscalation: false is what sets no_new_privs.
	p.NoNewPrivileges = !deref(sc.AllowPrivilegeEscalation, true)
	// Rlimits: the runtime's own, inherited (the chart sets none).

	profile := sc.SeccompProfile
	if profile == nil {
		profile = pod.SecurityContext.SeccompProfile
	}
	switch {
	case profile == nil || profile.Type == "Unconfined":
	case profile.Type == "RuntimeDefault":
		s.Linux.Seccomp = runtimeDefaultSeccomp(t, caps)
	default:
		t.Fatalf("seccompProfile %q: this run knows RuntimeDefault and Unconfined", profile.Type)
	}
	for _, ns := range []string{"pid", "ipc", "uts", "mount", "cgroup"} {
		s.Linux.Namespaces = append(s.Linux.Namespaces, struct{ Type string }{ns})
	}
	s.Linux.MaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"}
	s.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	s.Mounts = baseMounts()
	for _, vm := range c.VolumeMounts {
		s.Mounts = append(s.Mounts, volumeMount(t, r, vm.Name, vm.MountPath, vm.ReadOnly))
	}
	return s
}

// baseMounts are the kernel file systems every container runtime mounts.
func baseMounts() []specMount {
	return []specMount{
		{"/proc", "proc", "proc", nil},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"/dev/pts", "devpts", "devpts", []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"/dev/shm", "tmpfs", "shm", []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{"/dev/mqueue", "mqueue", "mqueue", []string{"nosuid", "noexec", "nodev"}},
		{"/sys", "sysfs", "sysfs", []string{"nosuid", "noexec", "nodev", "ro"}},
	}
}

// volumeMount is what the kubelet would mount for the named pod volume:
// an emptyDir of medium Memory is a tmpfs of its sizeLimit, a ConfigMap its
// data as files (read-only), a PersistentVolumeClaim an empty directory
// owned by the fsGroup (setgid, as fsGroupChangePolicy leaves it), a
// hostPath the host's path.
func volumeMount(t *testing.T, r rendered, name, dst string, ro bool) specMount {
	t.Helper()
	var v *volume
	for i := range r.Deployment.Spec.Template.Spec.Volumes {
		if r.Deployment.Spec.Template.Spec.Volumes[i].Name == name {
			v = &r.Deployment.Spec.Template.Spec.Volumes[i]
		}
	}
	if v == nil {
		t.Fatalf("volumeMount %s: no such volume", name)
	}
	bind := func(src string) specMount {
		opts := []string{"rbind", "nosuid", "nodev"}
		if ro {
			opts = append(opts, "ro")
		}
		return specMount{Destination: dst, Type: "bind", Source: src, Options: opts}
	}
	switch {
	case v.EmptyDir != nil:
		if v.EmptyDir.Medium != "Memory" {
			return bind(t.TempDir())
		}
		size, err := quantityBytes(v.EmptyDir.SizeLimit)
		if err != nil {
			t.Fatal(err)
		}
		return specMount{Destination: dst, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", size)}}
	case v.ConfigMap != nil:
		dir := t.TempDir()
		mode := os.FileMode(0o644)
		if v.ConfigMap.DefaultMode != nil {
			mode = os.FileMode(*v.ConfigMap.DefaultMode)
		}
		for k, data := range r.ConfigMap.Data {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(data), mode); err != nil {
				t.Fatal(err)
			}
		}
		return bind(dir)
	case v.PersistentVolumeClaim != nil:
		dir := t.TempDir()
		fsGroup := firstSet(r.Deployment.Spec.Template.Spec.SecurityContext.FSGroup)
		if fsGroup == nil {
			t.Fatal("a PVC without fsGroup: the non-root process could not write it")
		}
		if err := os.Chown(dir, 0, int(*fsGroup)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o2775); err != nil {
			t.Fatal(err)
		}
		return bind(dir)
	case v.HostPath != nil:
		if fi, err := os.Stat(v.HostPath.Path); err != nil || (v.HostPath.Type == "Socket" && fi.Mode()&os.ModeSocket == 0) {
			t.Fatalf("hostPath %s (type %s): %v", v.HostPath.Path, v.HostPath.Type, err)
		}
		return bind(v.HostPath.Path)
	}
	t.Fatalf("volume %s: a kind this run does not mount (socket mode needs none other)", name)
	return specMount{}
}

func writeSpec(t *testing.T, path string, s runtimeSpec) {
	t.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func firstSet[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}
