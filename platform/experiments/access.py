"""Fetching one experiment or run for a request, by the one visibility rule
(`VisibleToQuerySet`): one the user may not see answers 404, exactly like one that does not exist;
one they may see but not change answers 403 when they try to change it."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404


def may_change(user, obj) -> bool:
    """Whether `user` may change (edit, steer) `obj`, an Experiment or a Run."""
    return type(obj).objects.steerable_by(user).filter(pk=obj.pk).exists()


def get_for_user(queryset, user, pk: int, *, change: bool = False):
    """The row `pk` of `queryset` (a VisibleToQuerySet) if `user` may see it (Http404 otherwise);
    with `change`, also PermissionDenied unless they may change it."""
    obj = get_object_or_404(queryset.visible_to(user), pk=pk)
    if change and not may_change(user, obj):
        meta = queryset.model._meta
        raise PermissionDenied(
            f"you may see this {meta.verbose_name} but not change it: it is not yours, and "
            f"you lack the permission {meta.app_label}.change_{meta.model_name}"
        )
    return obj
