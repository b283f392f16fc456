/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every PostgreSQL version difference the extension cares about, in one
 *	  place. Supported: 15, 17 and 18.
 *
 * src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include "common/base64.h"
#include "utils/guc_tables.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "outbox requires PostgreSQL 15 or later"
#endif

/* From 16 the varlena macros (VARDATA_ANY...) have a header of their own. */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* pg_noreturn replaced pg_attribute_noreturn() in PostgreSQL 18. */
#if PG_VERSION_NUM >= 180000
#define OUTBOX_NORETURN_PRE pg_noreturn
#define OUTBOX_NORETURN_POST
#else
#define OUTBOX_NORETURN_PRE
#define OUTBOX_NORETURN_POST pg_attribute_noreturn()
#endif

/* A backend's local transaction id moved into MyProc->vxid in 17. */
#if PG_VERSION_NUM >= 170000
#define OUTBOX_MY_LXID (MyProc->vxid.lxid)
#else
#define OUTBOX_MY_LXID (MyProc->lxid)
#endif

/* PG_MODULE_MAGIC_EXT (18) records the name and version in the library. */
#if PG_VERSION_NUM >= 180000
#define OUTBOX_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "outbox", .version = OUTBOX_VERSION)
#else
#define OUTBOX_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/* IsBackgroundWorker became AmBackgroundWorkerProcess() in 17. */
#if PG_VERSION_NUM >= 170000
#define OutboxInBackgroundWorker() AmBackgroundWorkerProcess()
#else
#define OutboxInBackgroundWorker() IsBackgroundWorker
#endif

/* Ownership checks became generic in 16. */
#if PG_VERSION_NUM >= 160000
#define OutboxDatabaseOwnercheck(dboid, roleid) \
	object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define OutboxDatabaseOwnercheck(dboid, roleid) \
	pg_database_ownercheck((dboid), (roleid))
#endif

#if PG_VERSION_NUM >= 160000
#define OutboxRelationOwnercheck(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#else
#define OutboxRelationOwnercheck(relid, roleid) \
	pg_class_ownercheck((relid), (roleid))
#endif

/* And so did privilege checks on objects. */
#if PG_VERSION_NUM >= 160000
#define OutboxTablespaceAclcheck(spcoid, roleid, mode) \
	object_aclcheck(TableSpaceRelationId, (spcoid), (roleid), (mode))
#else
#define OutboxTablespaceAclcheck(spcoid, roleid, mode) \
	pg_tablespace_aclcheck((spcoid), (roleid), (mode))
#endif

#if PG_VERSION_NUM >= 160000
#define OutboxNamespaceAclcheck(nspoid, roleid, mode) \
	object_aclcheck(NamespaceRelationId, (nspoid), (roleid), (mode))
#define OutboxProcAclcheck(procoid, roleid, mode) \
	object_aclcheck(ProcedureRelationId, (procoid), (roleid), (mode))
#else
#define OutboxNamespaceAclcheck(nspoid, roleid, mode) \
	pg_namespace_aclcheck((nspoid), (roleid), (mode))
#define OutboxProcAclcheck(procoid, roleid, mode) \
	pg_proc_aclcheck((procoid), (roleid), (mode))
#endif

/*
 * The wait event a worker reports while it sleeps: its own name from 17 on
 * (custom wait events), the generic "Extension" before. Call after the
 * worker connected.
 */
static inline uint32
OutboxWaitEvent(const char *name)
{
#if PG_VERSION_NUM >= 170000
	return WaitEventExtensionNew(name);
#else
	(void) name;
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * The binary side of pg_b64_encode (source) and pg_b64_decode (destination)
 * is uint8 from 18 on, char before.
 */
#if PG_VERSION_NUM >= 180000
#define OUTBOX_B64_BYTES(p) ((uint8 *) (p))
#else
#define OUTBOX_B64_BYTES(p) ((char *) (p))
#endif

/*
 * Every setting the process knows, and their number in *n: the live array
 * before 16, a palloc'd copy (in the current memory context) from 16 on.
 */
static inline struct config_generic **
OutboxGucVariables(int *n)
{
#if PG_VERSION_NUM >= 160000
	return get_guc_variables(n);
#else
	*n = GetNumConfigOptions();
	return get_guc_variables();
#endif
}

/*
 * The "extra" of a GUC check hook: malloc'd before 16, from the GUC memory
 * context (guc_malloc, freed with guc_free) from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define OutboxGucMalloc(size) guc_malloc(LOG, (size))
#define OutboxGucFree(ptr) guc_free(ptr)
#else
#define OutboxGucMalloc(size) malloc(size)
#define OutboxGucFree(ptr) free(ptr)
#endif

/*
 * A WaitEventSet of the process, freed by its owner: from 17 on it can
 * belong to a resource owner instead of a memory context; none here.
 */
#if PG_VERSION_NUM >= 170000
#define OutboxCreateWaitEventSet(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define OutboxCreateWaitEventSet(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/* PostgreSQL 18 gives index_beginscan an instrumentation argument */
#if PG_VERSION_NUM >= 180000
#define OutboxIndexBeginScan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define OutboxIndexBeginScan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

#endif							/* OUTBOX_COMPAT_H */
