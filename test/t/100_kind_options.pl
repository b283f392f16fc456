# A destination kind's own settings live in outbox_destinations.options,
# declared by the kind and checked by outbox, as a foreign data wrapper's
# OPTIONS are by its validator. test/kind_check.c, built here against the
# installed headers and this tree's src/, declares the option list of a
# broker kind whose target is an option, and hands outbox's own checks
# declarations and values: the check run on every kind when the library
# loads, and the one the validation trigger runs on a row's options. Each
# refusal's SQLSTATE and message are checked; no message quotes a value.
# The readers a kind decodes options with are checked on rows of the table.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $module = kind_check_module();

my $node = outbox_node('options');
$node->safe_psql('postgres', qq{
	CREATE FUNCTION kind_options_decl(text) RETURNS text
	AS '$module', 'kind_options_decl' LANGUAGE C STRICT;
	CREATE FUNCTION kind_options_check(jsonb) RETURNS text
	AS '$module', 'kind_options_check' LANGUAGE C STRICT;
	CREATE FUNCTION kind_options_read(outbox_destinations) RETURNS text
	AS '$module', 'kind_options_read' LANGUAGE C STRICT});

sub decl
{
	my ($variant) = @_;
	my ($rc, $stdout, $stderr) =
	  $node->psql('postgres', "SELECT kind_options_decl('$variant')");
	return $rc == 0 ? $stdout : ($stderr =~ /ERROR:\s+(.*)/)[0];
}

# the declaration, checked when the library loads
is(decl('queue'), 'ok, target in options', 'a broker kind with its target in an option passes');
is(decl('none'), 'ok', 'a kind with no options and a target column passes');
my $k = 'outbox destination kind "test"';
is(decl('bad_name'),
	qq{$k has an option named "Queue", which is not lower case letters, digits and _},
	'an option name must be lower snake case');
is(decl('twice'), qq{$k declares option "queue" twice}, 'an option declared twice is refused');
is(decl('bounds'), qq{$k declares option "queue" with bounds out of order}, 'min above max is refused');
is(decl('empty_string'), qq{$k declares option "queue" with bounds out of order},
	'a string option cannot allow the empty string');
is(decl('long_string'), qq{$k declares option "queue" with bounds out of order},
	'nor strings over 8192 bytes');
is(decl('optional_target'),
	qq{$k keeps its target in option "queue", which is not a required string},
	'a target kept in an option must be required');
is(decl('integer_target'),
	qq{$k keeps its target in option "queue", which is not a required string},
	'and a string');

# a row's options, as the validation trigger checks them
sub opts
{
	my ($json) = @_;
	return $node->safe_psql('postgres', "SELECT kind_options_check(\$j\$$json\$j\$)");
}
my $list = 'The options of a test queue: queue, attempts, durable, brokers.';
is(opts('{"queue": "q"}'), 'ok', 'the required option alone');
is(opts('{"queue": "q", "attempts": 100, "durable": false, "brokers": ["a:1", "b:2", "c:3"]}'), 'ok',
	'every option at its bound');
is(opts('{"queue": "q", "attempts": 5.0}'), 'ok', '5.0 is the integer 5');
is(opts('{"queue": "q", "topik": "secret-value"}'),
	qq{22023: "topik" is not an option of a test queue ($list)},
	'a key the kind does not declare is refused, its list in the detail');
is(opts('{"queue": "q", "Bad Key": 1}'),
	"22023: destination options hold a key that is not an option of a test queue ($list)",
	'a key that is no option name is not quoted');
is(opts('{"attempts": 1}'), '23514: destination option "queue" is required for a test queue',
	'a required option missing');
is(opts('{"queue": ""}'), '22023: destination option "queue" must be a string that is not empty',
	'an empty string');
is(opts('{"queue": 7}'), '22023: destination option "queue" must be a string', 'a number for a string');
is(opts('{"queue": "' . ('q' x 256) . '"}'),
	'54000: destination option "queue" is longer than 255 bytes', 'a string over its length');
is(opts('{"queue": "a\\nb"}'),
	'22023: destination option "queue" must be a string without control characters',
	'a control character in a string');
for my $n ('0', '101', '1.5', '"5"', '1e30', 'true', 'null')
{
	is(opts(qq{{"queue": "q", "attempts": $n}}),
		'22023: destination option "attempts" must be an integer from 1 to 100',
		"attempts $n is refused");
}
is(opts('{"queue": "q", "durable": "yes"}'), '22023: destination option "durable" must be true or false',
	'a string for a boolean');
for my $b ('[]', '["a", "b", "c", "d"]', '"a"', '[1]', '[["a"]]', '{"a": "b"}')
{
	is(opts(qq{{"queue": "q", "brokers": $b}}),
		'22023: destination option "brokers" must be an array of 1 to 3 strings',
		"brokers $b is refused");
}
is(opts('{"queue": "q", "brokers": [""]}'),
	'22023: destination option "brokers" must be a string that is not empty', 'an empty entry');
is(opts('[{"queue": "q"}]'), q{22023: destination options must be a JSON object (Write '{}' for none.)},
	'options are an object');
is(opts(sprintf('{"queue": "q", "brokers": ["%s"]}', 'b' x 70000)),
	'54000: destination options are larger than 65536 bytes', 'options are at most 64 kB');

# the readers: options of rows of the table (made, not inserted: no kind
# built in declares these options)
sub read_row
{
	my ($json) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT kind_options_read(jsonb_populate_record(NULL::outbox_destinations,
			jsonb_build_object('name', 'd1', 'options', \$j\$$json\$j\$::jsonb)))});
}
is(read_row('{"queue": "orders", "attempts": 7, "durable": true, "brokers": ["a:1", "b:2"]}'),
	'queue=orders attempts=7 durable=true brokers=a:1,b:2 text(queue)=orders text(name)=d1',
	'each reader returns its option, and the text reader reads an option where there is no column');
is(read_row('{}'),
	'queue=(unset) attempts=(unset) durable=(unset) brokers=(unset) text(queue)=(unset) text(name)=d1',
	'unset options read as unset');
is(read_row('{"queue": 1, "attempts": "7", "durable": "true", "brokers": "a"}'),
	'queue=(unset) attempts=(unset) durable=(unset) brokers=(unset) text(queue)=(unset) text(name)=d1',
	'a value of another type (a row written with the trigger off) reads as unset');

$node->stop;
done_testing();
