package envoyside

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.ErrorLevel) // their packages log every connection at warning level
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir) // the binaries process_test.go built
	}
	os.Exit(code)
}
