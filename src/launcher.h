/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher worker, which keeps one relay running per database.
 *
 * src/launcher.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_LAUNCHER_H
#define OUTBOX_LAUNCHER_H

#include "fmgr.h"

#include "compat.h"

extern void OutboxRegisterLauncher(void);
extern PGDLLEXPORT OUTBOX_NORETURN_PRE void OutboxLauncherMain(Datum main_arg) OUTBOX_NORETURN_POST;

#endif							/* OUTBOX_LAUNCHER_H */
