package envoyside

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.ErrorLevel) // their packages log every connection at warning level
	os.Exit(m.Run())
}
