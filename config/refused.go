package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// pushACL is what config push's Redis user needs for keys' prefix
// "fg": the one key and the one channel it touches, and the commands it
// sends (STRLEN, EXISTS, GETRANGE and TYPE reading the stored document;
// EVALSHA, or EVAL when Redis does not have the script, of its
// compare-and-swap, whose script calls TYPE, GET and SET; INFO
// replication and WAIT confirming the document durable; PUBLISH
// announcing it). The grants add to a user's rules; docs/operations.md
// gives them after resetkeys, resetchannels and -@all
// (TestPushACLMatchesDocs compares them). pushACLFor puts another prefix
// in.
const pushACL = "~fg:config &fg:config:changed +strlen +exists +getrange +type +get +set +evalsha +eval +info +wait +publish"

// pushACLFor returns pushACL with the key and channel of keys.
func pushACLFor(keys Keys) string {
	return strings.NewReplacer("~fg:config ", "~"+keys.Config+" ", "&fg:config:changed ", "&"+keys.Channel+" ").Replace(pushACL)
}

// replyTo returns err, which cmd met, naming cmd when err is an error
// reply of Redis to it (NOPERM for an ACL user without cmd, READONLY,
// OOM...), so that a refusal reads as one, not as a missing or invalid
// document. A refused login (NOAUTH, WRONGPASS: the connection's, not
// cmd's) and the error of a Redis that did not answer are returned as
// they are.
func replyTo(cmd string, err error) error {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return err
	}
	if msg := reply.Error(); strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
		return err
	}
	return fmt.Errorf("%s refused: %w", cmd, err)
}

// aclRefused reports whether err holds an error reply of Redis refusing
// its ACL user a command, a key or a channel: NOPERM for a command sent,
// and, from a script (Redis 7.0), ERR "The user executing the script
// can't run this command" (or access a key or channel), which names
// neither.
func aclRefused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't")
}

// withPushGrant returns err with, when Redis refused the ACL user
// something (aclRefused), the fix: the ACL rules config push needs for
// keys. Other errors are returned as they are.
func withPushGrant(keys Keys, err error) error {
	if err == nil || !aclRefused(err) {
		return err
	}
	return fmt.Errorf("%w; grant the ACL user what config push sends (docs/operations.md, Redis ACL users): ACL SETUSER NAME %s (behind Sentinel add +client|info; on a Cluster +cluster|slots +command)", err, pushACLFor(keys))
}
