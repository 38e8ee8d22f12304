package streams_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/testenv"
	"github.com/cloudtransit/transit/freeport"
)

// The harness stands in for the kubelet: it runs each processor pod the
// controller's Deployments make as two processes on this machine — the
// real sidecar and the example function (cmd/streams-echo) — keeps the
// pod's status in step with the sidecar's readiness, restarts a process
// that dies (restartPolicy Always), and on deletion sends SIGTERM, waits,
// and removes the pod. The function image's tag picks its behaviour:
// "v2" → ECHO_VERSION=v2, "error500", "garbage", "hang", "drop" →
// ECHO_FAULT, "slow" → ECHO_DELAY=20ms, "slow-150ms" → ECHO_DELAY=150ms;
// an image named in badImages is never started: its container waits with
// that reason (ErrImagePull). Secret volumes are the Secret's keys written
// to a directory, and variables naming a mount path (or the termination
// message path) are pointed there; a container that exits non-zero shows
// its termination message as its last state, and is restarted after a
// doubling back-off (from 1 s to 10 s), as a kubelet's crash loop. It
// runs the pods of its test's namespace only.

type kubelet struct {
	t          testing.TB
	c          client.Client
	ns         string // the pods' namespace: the test's
	kubeconfig string
	sidecar    string
	function   string
	logs       string
	volumes    string

	mu        sync.Mutex
	closed    bool // the test ended: nothing starts any more
	pods      map[types.UID]*runningPod
	badImages map[string]string
	extraEnv  map[string]string // for every sidecar (e.g. a failpoint)
}

type runningPod struct {
	ns, name   string
	uid        types.UID
	procs      map[string]*process
	probe      string
	ready      bool
	stopping   bool
	terminated chan struct{}
	waiting    map[string]corev1.ContainerStateWaiting // never started
	reported   string                                  // the last termination messages written
}

type process struct {
	name     string
	bin      string
	env      []string
	cmd      *exec.Cmd
	done     chan struct{}
	restarts int32
	stopped  bool // by the harness: not restarted
	// termination is where the process writes its termination message;
	// lastExit is its last exit's code and message, failed its exits
	// in a row with a non-zero code (the back-off).
	termination string
	lastExit    *corev1.ContainerStateTerminated
	failed      int
}

// startKubelet runs the harness for the pods of namespace ns until the
// test ends.
func startKubelet(t testing.TB, e *testenv.Env, ns string) *kubelet {
	t.Helper()
	sidecar, function := cmdtest.Build(t, "streams-sidecar"), cmdtest.Build(t, "streams-echo")
	k := &kubelet{t: t, c: e.Client, ns: ns, kubeconfig: e.Kubeconfig, sidecar: sidecar, function: function,
		logs: t.TempDir(), volumes: t.TempDir(), pods: map[types.UID]*runningPod{}, badImages: map[string]string{}, extraEnv: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			k.sync(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		k.mu.Lock()
		k.closed = true
		var waits []chan struct{}
		for _, p := range k.pods {
			for _, pr := range p.procs {
				pr.kill(syscall.SIGKILL)
				if pr.done != nil {
					waits = append(waits, pr.done)
				}
			}
		}
		k.mu.Unlock()
		for _, w := range waits {
			<-w
		}
		if t.Failed() {
			k.dumpLogs()
		}
	})
	return k
}

func (k *kubelet) sync(ctx context.Context) {
	var pods corev1.PodList
	if err := k.c.List(ctx, &pods, client.InNamespace(k.ns), client.HasLabels{streams.LabelTopology}); err != nil {
		return
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		k.mu.Lock()
		rp := k.pods[pod.UID]
		k.mu.Unlock()
		switch {
		case !pod.DeletionTimestamp.IsZero():
			if rp == nil {
				_ = k.c.Delete(ctx, pod, client.GracePeriodSeconds(0))
			} else {
				k.terminate(ctx, pod, rp)
			}
		case rp == nil:
			k.start(ctx, pod)
		default:
			k.status(ctx, pod, rp)
		}
	}
	k.mu.Lock()
	for uid, rp := range k.pods {
		if !seen[uid] && !rp.stopping { // deleted without us: a forced delete
			rp.stopping = true
			for _, pr := range rp.procs {
				pr.stopped = true // not restarted: the pod is gone
				pr.kill(syscall.SIGKILL)
			}
			close(rp.terminated)
			delete(k.pods, uid)
		}
	}
	k.mu.Unlock()
}

func (k *kubelet) start(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			Target: corev1.ObjectReference{Kind: "Node", Name: "harness"}}
		if err := k.c.SubResource("binding").Create(ctx, pod, binding); err != nil {
			return
		}
	}
	rp := &runningPod{ns: pod.Namespace, name: pod.Name, uid: pod.UID, procs: map[string]*process{},
		probe: freeport.Addr(k.t), waiting: map[string]corev1.ContainerStateWaiting{}, terminated: make(chan struct{})}
	fport := strconv.Itoa(freeport.Port(k.t))
	for _, c := range pod.Spec.Containers {
		if reason, bad := k.badImage(c.Image); bad {
			rp.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: reason, Message: "harness: image " + c.Image + " cannot be pulled"}
			continue
		}
		paths, err := k.mount(ctx, pod, c)
		if err != nil {
			rp.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}
			continue
		}
		termination := filepath.Join(k.volumes, pod.Name+"."+c.Name+".termination-log")
		paths[c.TerminationMessagePath] = termination
		env := resolveEnv(pod, c.Env, paths)
		bin := k.function
		switch c.Name {
		case "sidecar":
			bin = k.sidecar
			env = append(env, "STREAMS_FUNCTION=http://127.0.0.1:"+fport+"/", "STREAMS_PROBE_ADDR="+rp.probe,
				"KUBECONFIG="+k.kubeconfig, "HOSTNAME="+pod.Name, "STREAMS_LOG_LEVEL=debug")
			k.mu.Lock()
			for key, v := range k.extraEnv {
				env = append(env, key+"="+v)
			}
			k.mu.Unlock()
		default:
			env = append(env, "PORT="+fport)
			_, tag, _ := strings.Cut(c.Image, ":")
			switch {
			case strings.HasPrefix(tag, "v"):
				env = append(env, "ECHO_VERSION="+tag)
			case tag == "slow":
				env = append(env, "ECHO_DELAY=20ms")
			case strings.HasPrefix(tag, "slow-"):
				env = append(env, "ECHO_DELAY="+strings.TrimPrefix(tag, "slow-"))
			case tag != "":
				env = append(env, "ECHO_FAULT="+tag)
			}
		}
		pr := &process{name: c.Name, bin: bin, env: append(os.Environ(), env...), termination: termination}
		rp.procs[c.Name] = pr
		k.run(pod.Name, pr)
	}
	k.mu.Lock()
	k.pods[pod.UID] = rp
	k.mu.Unlock()
	go k.supervise(rp)
	k.status(ctx, pod, rp)
}

// mount writes the Secret volumes c mounts into directories of their own,
// and returns the local path of each mount path.
func (k *kubelet) mount(ctx context.Context, pod *corev1.Pod, c corev1.Container) (map[string]string, error) {
	paths := map[string]string{}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Spec.Volumes[i].Secret == nil {
			return nil, fmt.Errorf("harness: volume %s is not a Secret", m.Name)
		}
		var secret corev1.Secret
		name := pod.Spec.Volumes[i].Secret.SecretName
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &secret); err != nil {
			return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", m.Name, err)
		}
		dir := filepath.Join(k.volumes, pod.Name+"."+m.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		for key, v := range secret.Data {
			if err := os.WriteFile(filepath.Join(dir, key), v, 0o600); err != nil {
				return nil, err
			}
		}
		paths[m.MountPath] = dir
	}
	return paths, nil
}

func (k *kubelet) badImage(image string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.badImages[image]
	return r, ok
}

// run starts a container's process, its output to a log file.
func (k *kubelet) run(pod string, pr *process) {
	// Everything under the lock: once the test ended (closed, its log
	// directory gone) nothing starts and nothing reports to its t.
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || pr.stopped {
		return
	}
	log, err := os.OpenFile(filepath.Join(k.logs, pod+"."+pr.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		k.t.Error(err)
		return
	}
	cmd := exec.Command(pr.bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = pr.env, log, log
	if err := cmd.Start(); err != nil {
		k.t.Errorf("start %s/%s: %v", pod, pr.name, err)
		log.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		k.mu.Lock()
		if code := cmd.ProcessState.ExitCode(); code > 0 {
			msg, _ := os.ReadFile(pr.termination)
			pr.lastExit = &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Error", Message: string(msg)}
			pr.failed++
		} else {
			pr.failed = 0
		}
		k.mu.Unlock()
		close(done)
	}()
	pr.cmd, pr.done = cmd, done
}

// supervise restarts processes that exit while their pod lives.
func (k *kubelet) supervise(rp *runningPod) {
	for {
		select {
		case <-rp.terminated:
			return
		case <-time.After(100 * time.Millisecond):
		}
		k.mu.Lock()
		for _, pr := range rp.procs {
			if pr.stopped || pr.done == nil {
				continue
			}
			select {
			case <-pr.done:
				pr.restarts++
				pr.done = nil
				wait := 200 * time.Millisecond
				if pr.failed > 0 {
					wait = min(time.Second<<(pr.failed-1), 10*time.Second)
				}
				go func() {
					time.Sleep(wait)
					k.run(rp.name, pr)
				}()
			default:
			}
		}
		k.mu.Unlock()
	}
}

func (pr *process) kill(sig syscall.Signal) {
	if pr.cmd != nil && pr.cmd.Process != nil {
		_ = pr.cmd.Process.Signal(sig)
	}
}

// terminate stops a deleted pod as the kubelet does: SIGTERM, the grace
// period, SIGKILL; then the pod object goes.
func (k *kubelet) terminate(ctx context.Context, pod *corev1.Pod, rp *runningPod) {
	k.mu.Lock()
	if rp.stopping {
		k.mu.Unlock()
		return
	}
	rp.stopping = true
	for _, pr := range rp.procs {
		pr.stopped = true
	}
	k.mu.Unlock()
	grace := time.Duration(30) * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	go func() {
		k.mu.Lock()
		procs := make([]*process, 0, len(rp.procs))
		for _, pr := range rp.procs {
			procs = append(procs, pr)
		}
		k.mu.Unlock()
		// The sidecar first: it finishes its batch with the function alive.
		for _, name := range []string{"sidecar", "function"} {
			for _, pr := range procs {
				if pr.name != name {
					continue
				}
				k.mu.Lock()
				done := pr.done
				k.mu.Unlock()
				if done == nil {
					continue
				}
				pr.kill(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(grace):
					pr.kill(syscall.SIGKILL)
					<-done
				}
			}
		}
		close(rp.terminated)
		err := k.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &rp.uid})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			k.t.Logf("harness: delete pod %s: %v", pod.Name, err)
		}
		k.mu.Lock()
		delete(k.pods, rp.uid)
		k.mu.Unlock()
	}()
}

// status writes the pod's phase, containers and readiness as the sidecar's
// /readyz says.
func (k *kubelet) status(ctx context.Context, pod *corev1.Pod, rp *runningPod) {
	ready := false
	if len(rp.waiting) == 0 {
		cl := http.Client{Timeout: 500 * time.Millisecond}
		if resp, err := cl.Get("http://" + rp.probe + "/readyz"); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
	}
	k.mu.Lock()
	var statuses []corev1.ContainerStatus
	var reported strings.Builder
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: ready}
		if waiting, ok := rp.waiting[c.Name]; ok {
			cs.Ready = false
			cs.State.Waiting = &waiting
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
			if pr := rp.procs[c.Name]; pr != nil {
				cs.RestartCount = pr.restarts
				if pr.lastExit != nil {
					cs.LastTerminationState.Terminated = pr.lastExit
					reported.WriteString(pr.lastExit.Message)
				}
			}
		}
		statuses = append(statuses, cs)
	}
	changed := ready != rp.ready || pod.Status.Phase != corev1.PodRunning || reported.String() != rp.reported
	rp.ready, rp.reported = ready, reported.String()
	k.mu.Unlock()
	if !changed {
		return
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = statuses
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: metav1.Now()},
	}
	if err := k.c.Status().Update(ctx, pod); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.t.Logf("harness: pod %s status: %v", pod.Name, err)
	}
}

// kill sends sig to a container's process of every pod whose name starts
// with prefix; the harness restarts it, as a kubelet would.
func (k *kubelet) kill(prefix, container string, sig syscall.Signal) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, rp := range k.pods {
		if strings.HasPrefix(rp.name, prefix) {
			if pr := rp.procs[container]; pr != nil {
				pr.kill(sig)
				n++
			}
		}
	}
	return n
}

func (k *kubelet) dumpLogs() {
	entries, _ := os.ReadDir(k.logs)
	for _, e := range entries {
		f, err := os.Open(filepath.Join(k.logs, e.Name()))
		if err != nil {
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.Close()
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		k.t.Logf("harness log %s:\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

// resolveEnv turns a container's env into KEY=value, with the downward
// API fields the controller uses.
func resolveEnv(pod *corev1.Pod, vars []corev1.EnvVar, paths map[string]string) []string {
	var out []string
	for _, v := range vars {
		val := v.Value
		for from, to := range paths {
			if from != "" {
				val = strings.ReplaceAll(val, from, to) // a path, or a path in JSON
			}
		}
		if v.ValueFrom != nil && v.ValueFrom.FieldRef != nil {
			switch v.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				val = pod.Namespace
			case "metadata.name":
				val = pod.Name
			}
		}
		out = append(out, v.Name+"="+val)
	}
	return out
}
