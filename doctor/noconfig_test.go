package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestInstanceWithNoConfigurationFails: an instance started with
// --config-from-redis while the document was unusable runs with no
// configuration (version "", /readyz no-configuration) and answers every
// HTTP decision 503. A re-walk saw "[PASS] config-version: every instance
// runs configuration version """ for it, Config/validates say of it that
// it keeps the configuration it applied (it never applied one), and the
// ready check's fix speak only of degraded and draining instances.
func TestInstanceWithNoConfigurationFails(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	none := startInstance(t, client, "nc", instanceOptions{source: "redis:nc:config", pending: true, discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nc", Instances: []string{none.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "config-version", doctor.Fail, "1 of 1 instance has no configuration", "503",
		none.url+": no configuration")
	if !strings.Contains(c.Fix, "floodgate config push FILE") {
		t.Errorf("config-version fix %q does not say to push a document", c.Fix)
	}
	c = want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, none.url+": no-configuration (HTTP 503)")
	if !strings.Contains(c.Fix, "no-configuration") || !strings.Contains(c.Fix, "floodgate config push FILE") {
		t.Errorf("ready fix %q does not cover an instance with no configuration", c.Fix)
	}
	c = want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "1 instance reading it has none", none.url+" reads it and has no configuration")
	if strings.Contains(c.Summary, "keep") {
		t.Errorf("validates says an instance that never applied a configuration keeps one: %q", c.Summary)
	}

	// With an instance that applied one: each is told apart.
	publish(t, client, "nc", testConfig)
	applied := startInstance(t, client, "nc", instanceOptions{doc: testConfig, source: "redis:nc:config", discipline: true})
	if err := client.Del(t.Context(), "nc:config").Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nc", Instances: []string{applied.url, none.url}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Fail, "1 of 2 instances have no configuration", `the others: each runs configuration version "7"`)
	want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "1 instance read theirs from it: it keeps the one it applied",
		"1 instance reading it has none")
}

// TestSignedFleetGivenItsFile: instances that read a document pushed with
// --sign-key-file report the hash of the stored document, signature line
// included. Given the file they run (--config FILE), doctor used to warn
// that they ran "not the document v7.yaml holds under that version",
// though its own advice is to give it that file. It now reads
// <prefix>:config (one command, in the check's Read) and passes when the
// document there is the instances' and, without its signature line, the
// file; another file under the same version still warns.
func TestSignedFleetGivenItsFile(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	keys, err := config.KeysFor("sg")
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(strings.Repeat("k", config.MinSignKeyLen))
	cfg, err := config.PublishWith(t.Context(), client, keys, []byte(testConfig), config.PublishOptions{SignKey: key})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := config.Sign([]byte(testConfig), key)
	if err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, client, "sg", instanceOptions{doc: string(signed), source: "redis:sg:config", discipline: true})
	if got, err := config.Parse(signed, "signed"); err != nil || got.Hash() != cfg.Hash() {
		t.Fatalf("the instance's document is not the one stored (%v)", err)
	}
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "sg", ConfigFile: writeConfig(t, testConfig),
		Instances: []string{in.url}, RateWindow: -1}
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupInstances, "config-version", doctor.Pass, `every instance runs configuration version "7"`, "signed",
		"sg:config holds the instances' document")
	if c.RedisCommands != 1 || !strings.Contains(c.Read, "GETRANGE sg:config") {
		t.Errorf("config-version sent %d Redis commands, read %q: want the one GETRANGE, said", c.RedisCommands, c.Read)
	}

	// Another document under the same version is not the instances'.
	opts.ConfigFile = writeConfig(t, testConfig+"# changed\n")
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Warn, "not the document", "without its signature line it is not")
}
