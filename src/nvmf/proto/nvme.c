/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "nvmf/proto/nvme.h"

/*
 * Every status the host may see, with the name and the sentence of the NVMe
 * specifications (nvme-cli prints the same two): generic, command specific
 * (SCT 1: those of the admin commands, then the Fabrics ones; SC 0x80-0x91 in
 * SCT 1 name the Fabrics statuses, as only Connect and Authentication use
 * them over fabrics), media and path.
 */
static const struct nvme_status_name {
	uint16_t status;
	const char *name;
	const char *what;
} status_names[] = {
	{ GDX_NVME_SC_SUCCESS, "Successful Completion", "The command completed without error" },
	{ GDX_NVME_SC_INVALID_OPCODE, "Invalid Command Opcode",
	  "A reserved coded value or an unsupported value in the command opcode field" },
	{ GDX_NVME_SC_INVALID_FIELD, "Invalid Field in Command",
	  "A reserved coded value or an unsupported value in a defined field" },
	{ GDX_NVME_SC_CMDID_CONFLICT, "Command ID Conflict",
	  "The command identifier is already in use" },
	{ GDX_NVME_SC_DATA_XFER_ERROR, "Data Transfer Error",
	  "Transferring the data or metadata associated with a command experienced an error" },
	{ 0x05, "Commands Aborted due to Power Loss Notification",
	  "The command was aborted due to a power loss notification" },
	{ GDX_NVME_SC_INTERNAL, "Internal Error",
	  "The command was not completed successfully due to an internal error" },
	{ GDX_NVME_SC_ABORT_REQ, "Command Abort Requested",
	  "The command was aborted due to an Abort command" },
	{ 0x08, "Command Aborted due to SQ Deletion",
	  "The command was aborted due to a Delete I/O Submission Queue" },
	{ GDX_NVME_SC_INVALID_NS, "Invalid Namespace or Format",
	  "The namespace or the format of that namespace is invalid" },
	{ GDX_NVME_SC_CMD_SEQ_ERROR, "Command Sequence Error",
	  "The command was aborted due to a protocol violation in a multi-command sequence" },
	{ GDX_NVME_SC_SGL_INVALID_LAST, "Invalid SGL Segment Descriptor",
	  "The command includes an invalid SGL Last Segment or SGL Segment descriptor" },
	{ GDX_NVME_SC_SGL_INVALID_COUNT, "Invalid Number of SGL Descriptors",
	  "There is an SGL Last Segment descriptor or an SGL Segment descriptor in a location "
	  "other than the last descriptor of a segment" },
	{ GDX_NVME_SC_SGL_INVALID_DATA, "Data SGL Length Invalid",
	  "The length of a Data SGL is too short or too long" },
	{ GDX_NVME_SC_SGL_INVALID_TYPE, "SGL Descriptor Type Invalid",
	  "The type of an SGL Descriptor is a type that is not supported by the controller" },
	{ GDX_NVME_SC_SGL_INVALID_OFFSET, "SGL Offset Invalid",
	  "The offset specified in a descriptor is invalid" },
	{ 0x19, "Keep Alive Timer Expired", "The Keep Alive Timer expired" },
	{ GDX_NVME_SC_KA_TIMEOUT_INVALID, "Keep Alive Timeout Invalid",
	  "The Keep Alive Timeout value specified is invalid" },
	{ GDX_NVME_SC_NS_WRITE_PROTECTED, "Namespace is Write Protected",
	  "The command is prohibited while the namespace is write protected" },
	{ 0x21, "Command Interrupted",
	  "Command processing was interrupted and the controller is unable to successfully "
	  "complete the command" },
	{ GDX_NVME_SC_TRANSIENT_TR_ERR, "Transient Transport Error",
	  "A transient transport error was detected" },
	{ GDX_NVME_SC_LBA_RANGE, "LBA Out of Range",
	  "The command references an LBA that exceeds the size of the namespace" },
	{ GDX_NVME_SC_CAP_EXCEEDED, "Capacity Exceeded",
	  "Execution of the command has caused the capacity of the namespace to be exceeded" },
	{ GDX_NVME_SC_NS_NOT_READY, "Namespace Not Ready",
	  "The namespace is not ready to be accessed" },
	{ 0x83, "Reservation Conflict",
	  "The command was aborted due to a conflict with a reservation held on the accessed "
	  "namespace" },
	{ GDX_NVME_ST(1, 0x00), "Completion Queue Invalid",
	  "The Completion Queue identifier specified in the command does not exist" },
	{ GDX_NVME_ST(1, 0x01), "Invalid Queue Identifier",
	  "The queue identifier specified in the command is invalid" },
	{ GDX_NVME_ST(1, 0x02), "Invalid Queue Size",
	  "The host attempted to create a queue with an invalid number of entries" },
	{ GDX_NVME_SC_ABORT_LIMIT, "Abort Command Limit Exceeded",
	  "The number of concurrently outstanding Abort commands has exceeded the limit" },
	{ GDX_NVME_SC_ASYNC_LIMIT, "Asynchronous Event Request Limit Exceeded",
	  "The number of concurrently outstanding Asynchronous Event Request commands has been "
	  "exceeded" },
	{ GDX_NVME_SC_INVALID_LOG_PAGE, "Invalid Log Page", "The log page indicated is invalid" },
	{ GDX_NVME_SC_FEATURE_NOT_SAVEABLE, "Feature Identifier Not Saveable",
	  "The Feature Identifier specified does not support a saveable value" },
	{ GDX_NVME_ST(1, 0x0e), "Feature Not Changeable",
	  "The Feature Identifier is not able to be changed" },
	{ GDX_NVME_ST(1, 0x0f), "Feature Not Namespace Specific",
	  "The Feature Identifier specified is not namespace specific" },
	{ GDX_NVME_SC_CONNECT_FORMAT, "Incompatible Format",
	  "The NVM subsystem does not support the record format specified by the host" },
	{ GDX_NVME_SC_CONNECT_CTRL_BUSY, "Controller Busy",
	  "The controller is already associated with a host" },
	{ GDX_NVME_SC_CONNECT_INVALID_PARAM, "Connect Invalid Parameters",
	  "One or more of the command parameters is invalid" },
	{ GDX_NVME_SC_CONNECT_RESTART_DISC, "Connect Restart Discovery",
	  "The NVM subsystem requested is not available" },
	{ GDX_NVME_SC_CONNECT_INVALID_HOST, "Connect Invalid Host",
	  "The host is not allowed to establish an association to either any controller in the "
	  "NVM subsystem or the specified controller" },
	{ GDX_NVME_ST(1, 0x85), "Invalid Queue Type",
	  "The command was sent on the wrong queue type" },
	{ GDX_NVME_ST(1, 0x90), "Discover Restart",
	  "The snapshot of the records is now invalid or out of date" },
	{ GDX_NVME_SC_AUTH_REQUIRED, "Authentication Required",
	  "NVMe in-band authentication is required and the queue has not yet been authenticated" },
	{ GDX_NVME_SC_WRITE_FAULT, "Write Fault",
	  "The write data could not be committed to the media" },
	{ GDX_NVME_SC_READ_ERROR, "Unrecovered Read Error",
	  "The read data could not be recovered from the media" },
	{ GDX_NVME_ST(2, 0x85), "Compare Failure",
	  "The command failed due to a miscompare during a Compare command" },
	{ GDX_NVME_SC_ACCESS_DENIED, "Access Denied",
	  "Access to the namespace and/or LBA range is denied due to lack of access rights" },
	{ GDX_NVME_ST(2, 0x87), "Deallocated or Unwritten Logical Block",
	  "The command failed due to an attempt to read from or verify an LBA range containing "
	  "a deallocated or unwritten logical block" },
	{ GDX_NVME_SC_INTERNAL_PATH, "Internal Path Error",
	  "An internal error specific to the controller processing the command prevented "
	  "completion" },
	{ GDX_NVME_ST(3, 0x01), "Asymmetric Access Persistent Loss",
	  "The controller is in a persistent loss state with the requested namespace" },
	{ GDX_NVME_ST(3, 0x02), "Asymmetric Access Inaccessible",
	  "The controller is in an inaccessible state with the requested namespace" },
	{ GDX_NVME_ST(3, 0x03), "Asymmetric Access Transition",
	  "The controller is currently transitioning states with the requested namespace" },
	{ GDX_NVME_ST(3, 0x60), "Controller Pathing Error",
	  "A pathing error was detected by the controller" },
	{ GDX_NVME_ST(3, 0x70), "Host Pathing Error", "A pathing error was detected by the host" },
	{ GDX_NVME_ST(3, 0x71), "Command Aborted By Host",
	  "The command was aborted as a result of host action" },
};

/* Looked up on error paths only: a scan is plenty. */
static const struct nvme_status_name *status_find(uint16_t status)
{
	for (size_t i = 0; i < GDX_ARRAY_SIZE(status_names); i++)
		if (status_names[i].status == (status & 0x7ff))
			return &status_names[i];
	return NULL;
}

const char *gdx_nvme_status_str(uint16_t status)
{
	const struct nvme_status_name *n = status_find(status);

	if (n)
		return n->name;
	return GDX_NVME_ST_SCT(status) == 7 ? "Vendor Specific Status" : "Unknown Status";
}

const char *gdx_nvme_status_what(uint16_t status)
{
	const struct nvme_status_name *n = status_find(status);

	return n ? n->what : NULL;
}

int gdx_nvme_nqn_check(const char *field, size_t field_size)
{
	size_t n = strnlen(field, field_size);

	if (n == 0 || n == field_size || n > GDX_NVME_NQN_MAX)
		return -EINVAL;
	return (int)n;
}

void gdx_nvme_field_str(char *dst, size_t n, const char *field, size_t field_size)
{
	size_t len = strnlen(field, field_size);

	while (len && field[len - 1] == ' ')
		len--;
	if (!n)
		return;
	len = GDX_MIN(len, n - 1);
	memcpy(dst, field, len);
	dst[len] = 0;
}

void gdx_nvme_field_pad(char *field, size_t field_size, const char *s)
{
	size_t len = GDX_MIN(strlen(s), field_size);

	memcpy(field, s, len);
	memset(field + len, ' ', field_size - len);
}

uint16_t gdx_nvme_sgl_parse(const struct gdx_nvme_sqe *c, struct gdx_nvme_sgl_info *out)
{
	out->length = c->dptr.length;
	out->in_capsule = false;
	if ((c->flags & GDX_NVME_FLAGS_PSDT_MASK) != GDX_NVME_FLAGS_PSDT_SGL)
		return GDX_NVME_SC_INVALID_FIELD;
	/* nothing to transfer: the descriptor type does not matter (nvmet agrees) */
	if (!c->dptr.length && c->dptr.type != GDX_NVME_SGL_DATA_BLOCK_OFFSET)
		return GDX_NVME_SC_SUCCESS;
	/* Transport SGL Data Block: Linux uses subtype 0xA; nvmet takes any */
	if ((c->dptr.type >> 4) == (GDX_NVME_SGL_TRANSPORT >> 4))
		return GDX_NVME_SC_SUCCESS;
	switch (c->dptr.type) {
	case GDX_NVME_SGL_DATA_BLOCK_OFFSET:
		/* ICDOFF is 0: in-capsule data starts right after the SQE. */
		if (c->dptr.addr != 0)
			return GDX_NVME_SC_SGL_INVALID_OFFSET;
		out->in_capsule = true;
		return GDX_NVME_SC_SUCCESS;
	default:
		return GDX_NVME_SC_SGL_INVALID_TYPE;
	}
}
