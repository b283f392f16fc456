# A user trigger on outbox that raises for one event must cost that event
# only: the relay keeps running (same process, no restart loop), every other
# event is sent once and marked delivered, and the poison event is retried
# with backoff and dead-lettered on its own, with the trigger's message in
# last_error. Three poisons, for the steps of the relay that update a row:
#   claim:  the trigger refuses every update of a NOTIFY event, which the
#           claim marks delivered in its own transaction, so no claim that
#           includes it can commit (and a failed claim notifies nothing)
#   any:    the trigger refuses every update of an HTTP event; the claim
#           writes nothing to its row, so it is sent, its outcome is refused
#           and a failed attempt is recorded instead, with user triggers
#           off; sent again until dead
#   record: the trigger refuses only the delivered mark, so the request is
#           sent and its outcome cannot be recorded; a failed attempt is
#           recorded instead, and the event is sent again until dead
# Caught errors are logged, but at most once per 10 s.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use Test::More;

poison_scenario('poison',
	'CREATE TRIGGER poison BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION poison();',
	'NEW', 'refused by the trigger');
done_testing();
