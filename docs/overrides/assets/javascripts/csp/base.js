// Material for MkDocs' inline script of partials/javascripts/base.html as a file, so that the docs
// run under the platform's Content-Security-Policy (no inline scripts; docs/overrides/). Unchanged
// but for the storage scope, which comes from the script tag's data-scope.
var __md_scope=new URL(document.currentScript.dataset.scope,location),__md_hash=e=>[...e].reduce(((e,_)=>(e<<5)-e+_.charCodeAt(0)),0),__md_get=(e,_=localStorage,t=__md_scope)=>JSON.parse(_.getItem(t.pathname+"."+e)),__md_set=(e,_,t=localStorage,a=__md_scope)=>{try{t.setItem(a.pathname+"."+e,JSON.stringify(_))}catch(e){}}
