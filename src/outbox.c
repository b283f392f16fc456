/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  Module entry point of the outbox extension.
 *
 * _PG_init defines the settings in every process that loads the library.
 * Only when the library is in shared_preload_libraries does it also request
 * shared memory, install the DROP DATABASE guard and register the launcher;
 * loaded any other way, events are still stored by outbox_emit() and
 * delivered by outbox_relay(), but there is no background worker.
 *
 * src/outbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "compat.h"
#include "destination.h"
#include "kind_registry.h"
#include "guc.h"
#include "health.h"
#include "launcher.h"
#include "shmem.h"
#include "dropdb_guard.h"

OUTBOX_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	/* settings first, in any process, so that SHOW works everywhere */
	OutboxDefineGucs();
	OutboxKindsInit();
	MarkGUCPrefixReserved("outbox");

	if (!process_shared_preload_libraries_in_progress)
		return;

	/* each area installs its own shared-memory hooks */
	OutboxShmemInit();
	OutboxInFlightShmemInit();
	OutboxHealthShmemInit();
	OutboxInstallUtilityHook();
	OutboxRegisterLauncher();
}
