# A COMMIT of the relay that fails (here a deferred constraint trigger on
# outbox raises at COMMIT for one event) must cost that event only, as an
# error inside a statement does (012): the relay keeps running (same
# process, no restart loop), every other event is sent once and marked
# delivered, and the poison event is retried with backoff and dead-lettered
# on its own, with the trigger's message in last_error. Three poisons, for
# the steps of the relay that commit row changes:
#   claim:  any change to a NOTIFY event fails at COMMIT; the claim marks
#           it delivered in its own transaction, so no claim that includes
#           it commits (and a failed claim notifies nothing)
#   any:    any change to an HTTP event fails at COMMIT; the claim writes
#           nothing to its row, so it is sent, its outcome fails and a
#           failed attempt is recorded instead, with user triggers off;
#           sent again until dead
#   record: only the delivered mark fails at COMMIT, so the request is sent
#           and its outcome cannot be recorded; a failed attempt is recorded
#           instead, and the event is sent again until dead
# Caught errors are logged, but at most once per 10 s.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use Test::More;

poison_scenario('deferred',
	'CREATE CONSTRAINT TRIGGER poison AFTER UPDATE ON outbox
	    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION poison();',
	'NULL', 'refused at commit');
done_testing();
