package check

import (
	"io"
	"log"
	"os"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
)

func TestMain(m *testing.M) {
	log.SetOutput(io.Discard) // Helm logs each symbolic link of files/ it follows.
	os.Exit(m.Run())
}

// rendered lints, renders and strictly decodes one case, failing the test on any error.
func rendered(t *testing.T, c Case) []kruntime.Object {
	t.Helper()
	vals, err := Values(c)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	if err := Lint(vals); err != nil {
		t.Fatal(err)
	}
	manifest, err := Render(vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objects, err := Decode(manifest)
	if err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	return objects
}

// renderError renders a case that must be refused and returns the error.
func renderError(t *testing.T, c Case) error {
	t.Helper()
	vals, err := Values(c)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	if _, err := Render(vals); err != nil {
		return err
	}
	t.Fatalf("%s rendered, but must be refused", c.Name)
	return nil
}

// workload is a pod template with the name of the object that owns it.
type workload struct {
	name     string
	selector map[string]string
	pod      corev1.PodTemplateSpec
}

func workloads(objects []kruntime.Object) []workload {
	var found []workload
	for _, object := range objects {
		switch o := object.(type) {
		case *appsv1.DaemonSet:
			found = append(found, workload{o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template})
		case *appsv1.Deployment:
			found = append(found, workload{o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template})
		}
	}
	return found
}

func kinds(objects []kruntime.Object) map[string]int {
	counts := map[string]int{}
	for _, object := range objects {
		counts[object.GetObjectKind().GroupVersionKind().Kind]++
	}
	return counts
}

func TestCasesRenderIntoTheirGoTypes(t *testing.T) {
	cases, err := Cases()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 4 {
		t.Fatalf("want the defaults and at least the minimal, secure and large values files, got %v", cases)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			objects := rendered(t, c)
			vals, _ := Values(c)
			checkReferences(t, objects, vals)
			counts := kinds(objects)
			if counts["DaemonSet"] != 1 || counts["Deployment"] != 1 || counts["Service"] != 2 {
				t.Errorf("want one DaemonSet, one Deployment and two Services, got %v", counts)
			}
			monitoring := c.Name != "minimal"
			if (counts["PrometheusRule"] > 0) != monitoring || (counts["ServiceMonitor"] == 1) != monitoring {
				t.Errorf("PrometheusRule and ServiceMonitor objects: want them = %v, got %v", monitoring, counts)
			}
		})
	}
}

// checkReferences pins what the API server would accept but leave broken: selectors that miss their pods,
// Services without endpoints or with unknown target ports, volumes of objects that do not exist, and collector
// --config files missing from the mounted ConfigMap.
func checkReferences(t *testing.T, objects []kruntime.Object, vals map[string]any) {
	t.Helper()
	configMaps := map[string]*corev1.ConfigMap{}
	secrets := map[string]bool{}
	secure, _ := vals["secure"].(map[string]any)
	for _, key := range []string{"tls", "token", "stores"} {
		if section, ok := secure[key].(map[string]any); ok {
			if name, _ := section["existingSecret"].(string); name != "" {
				secrets[name] = true
			}
		}
	}
	for _, object := range objects {
		switch o := object.(type) {
		case *corev1.ConfigMap:
			configMaps[o.Name] = o
		case *corev1.Secret:
			secrets[o.Name] = true
		}
	}
	pods := workloads(objects)
	for _, w := range pods {
		if !labels.SelectorFromSet(w.selector).Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not match its pods' labels %v", w.name, w.selector, w.pod.Labels)
		}
		mounted := map[string]*corev1.ConfigMap{}
		for _, volume := range w.pod.Spec.Volumes {
			switch {
			case volume.ConfigMap != nil:
				configMap, ok := configMaps[volume.ConfigMap.Name]
				if !ok {
					t.Errorf("%s: volume %s: no ConfigMap %q", w.name, volume.Name, volume.ConfigMap.Name)
				}
				mounted[volume.Name] = configMap
			case volume.Secret != nil && !secrets[volume.Secret.SecretName]:
				t.Errorf("%s: volume %s: Secret %q is neither rendered nor named in the values", w.name, volume.Name,
					volume.Secret.SecretName)
			}
		}
		for _, container := range w.pod.Spec.Containers {
			for _, arg := range container.Args {
				path, ok := strings.CutPrefix(arg, "--config=")
				if !ok {
					continue
				}
				if !configFileMounted(path, container.VolumeMounts, mounted) {
					t.Errorf("%s: %s is no key of a mounted ConfigMap", w.name, arg)
				}
			}
		}
	}
	for _, object := range objects {
		switch o := object.(type) {
		case *corev1.Service:
			checkService(t, o, pods)
		case *monitoringv1.ServiceMonitor:
			checkServiceMonitor(t, o, objects)
		}
	}
}

func configFileMounted(path string, mounts []corev1.VolumeMount, configMaps map[string]*corev1.ConfigMap) bool {
	for _, mount := range mounts {
		key, ok := strings.CutPrefix(path, mount.MountPath+"/")
		if configMap := configMaps[mount.Name]; ok && configMap != nil {
			if _, found := configMap.Data[key]; found {
				return true
			}
		}
	}
	return false
}

func checkService(t *testing.T, service *corev1.Service, pods []workload) {
	t.Helper()
	selector := labels.SelectorFromSet(service.Spec.Selector)
	for _, w := range pods {
		if !selector.Matches(labels.Set(w.pod.Labels)) {
			continue
		}
		ports := map[string]bool{}
		for _, container := range w.pod.Spec.Containers {
			for _, port := range container.Ports {
				ports[port.Name] = true
			}
		}
		for _, port := range service.Spec.Ports {
			if !ports[port.TargetPort.StrVal] {
				t.Errorf("Service %s: target port %q is not a port of %s", service.Name, port.TargetPort.StrVal, w.name)
			}
		}
		return
	}
	t.Errorf("Service %s: selector %v matches no pods", service.Name, service.Spec.Selector)
}

func checkServiceMonitor(t *testing.T, monitor *monitoringv1.ServiceMonitor, objects []kruntime.Object) {
	t.Helper()
	selected := 0
	for _, object := range objects {
		service, ok := object.(*corev1.Service)
		if !ok || !labels.SelectorFromSet(monitor.Spec.Selector.MatchLabels).Matches(labels.Set(service.Labels)) {
			continue
		}
		selected++
		for _, endpoint := range monitor.Spec.Endpoints {
			found := false
			for _, port := range service.Spec.Ports {
				found = found || port.Name == endpoint.Port
			}
			if !found {
				t.Errorf("ServiceMonitor %s: Service %s has no port %q", monitor.Name, service.Name, endpoint.Port)
			}
		}
	}
	if selected != 2 {
		t.Errorf("ServiceMonitor %s: want the agent and gateway Services, selects %d", monitor.Name, selected)
	}
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	manifest := "---\n# Source: otel-rl/templates/x.yaml\napiVersion: apps/v1\nkind: Deployment\n" +
		"metadata:\n  name: x\nspec:\n  replica: 2\n  selector: {matchLabels: {a: b}}\n" +
		"  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}\n"
	_, err := Decode(manifest)
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.replica"`) {
		t.Fatalf("want an unknown field error for spec.replica, got %v", err)
	}
	if _, err := Decode(strings.Replace(manifest, "replica:", "replicas:", 1)); err != nil {
		t.Fatalf("the corrected Deployment must decode: %v", err)
	}
}

func TestUnknownValuesAreRefused(t *testing.T) {
	err := renderError(t, Case{Name: "typo", Overrides: map[string]any{"gateway": map[string]any{"replica": 3}}})
	if !strings.Contains(err.Error(), "replica") {
		t.Fatalf("want the schema to name the unknown key, got %v", err)
	}
}

func TestSecureNeedsItsSecrets(t *testing.T) {
	err := renderError(t, Case{Name: "secure-bare", Overrides: map[string]any{"secure": map[string]any{"enabled": true}}})
	if !strings.Contains(err.Error(), "secure.enabled needs secure.tls.existingSecret") {
		t.Fatalf("want the missing TLS Secret named, got %v", err)
	}
}

func TestSecureSecretsFromValues(t *testing.T) {
	secureValues := Case{Name: "secure-values", ValuesFiles: []string{"values/secure.yaml"}, Overrides: map[string]any{
		"secure": map[string]any{
			"tls":   map[string]any{"existingSecret": "", "crt": "CERT", "key": "KEY", "ca": "CA"},
			"token": map[string]any{"existingSecret": "", "value": "s3cret"},
		},
	}}
	objects := rendered(t, secureValues)
	found := map[string]*corev1.Secret{}
	for _, object := range objects {
		if secret, ok := object.(*corev1.Secret); ok {
			found[secret.Name] = secret
		}
	}
	tls, token := found[ReleaseName+"-tls"], found[ReleaseName+"-token"]
	if tls == nil || token == nil {
		t.Fatalf("want the TLS and token Secrets, got %v", found)
	}
	if tls.Type != corev1.SecretTypeTLS || string(tls.Data["tls.crt"]) != "CERT" || string(tls.Data["ca.crt"]) != "CA" {
		t.Errorf("TLS Secret: %v %v", tls.Type, tls.Data)
	}
	if string(token.Data["token"]) != "s3cret" {
		t.Errorf("token Secret: %v", token.Data)
	}
	vals, _ := Values(secureValues)
	checkReferences(t, objects, vals)
}

func TestAlertmanagerConfigurationOption(t *testing.T) {
	config := map[string]any{
		"route":     map[string]any{"receiver": "rl-team", "group_by": []any{"alertname", "rl_run_id"}},
		"receivers": []any{map[string]any{"name": "rl-team"}},
	}
	objects := rendered(t, Case{Name: "alertmanager", Overrides: map[string]any{
		"alertmanager": map[string]any{"enabled": true, "config": config},
	}})
	var secret *corev1.Secret
	for _, object := range objects {
		if s, ok := object.(*corev1.Secret); ok && s.Name == ReleaseName+"-alertmanager" {
			secret = s
		}
	}
	if secret == nil || !strings.Contains(secret.StringData["alertmanager.yaml"], "receiver: rl-team") {
		t.Fatalf("want the Alertmanager Secret with the configured route, got %v", secret)
	}
}

func TestImageDigestWinsOverTag(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	objects := rendered(t, Case{Name: "digest", Overrides: map[string]any{
		"image": map[string]any{"tag": "9.9.9", "digest": digest},
	}})
	for _, w := range workloads(objects) {
		if image := w.pod.Spec.Containers[0].Image; image != "otel-rl/otelcol-rl@"+digest {
			t.Errorf("%s: image %q", w.name, image)
		}
	}
}

func TestAlertmanagerConfigurationFromTheRepositoryFile(t *testing.T) {
	want, err := os.ReadFile(Root() + "/alertmanager/alertmanager.yml")
	if err != nil {
		t.Fatal(err)
	}
	objects := rendered(t, Case{Name: "alertmanager-file", Overrides: map[string]any{"alertmanager": map[string]any{"enabled": true}}})
	for _, object := range objects {
		if s, ok := object.(*corev1.Secret); ok && s.Name == ReleaseName+"-alertmanager" {
			if s.StringData["alertmanager.yaml"] != strings.TrimRight(string(want), "\n") {
				t.Fatalf("the Secret is not alertmanager/alertmanager.yml:\n%s", s.StringData["alertmanager.yaml"])
			}
			return
		}
	}
	t.Fatal("no Alertmanager Secret rendered")
}
